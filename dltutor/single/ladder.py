"""The fast path as a ladder: one knob of notebook 01 added per rung, each rung trained to a target.

`LADDER` is what `bench/bench_time_to_accuracy.py --ladder` runs on a GPU node (`make gpu-check`'s
measurements); `record_ladder()` finds the newest GPU verification record (docs/verified/*.json of
the course's checkout) that holds such a run, and `ladder_rows` / `ladder_sentences` turn it into
the table and the sentences notebook 01 prints: every figure is the record's, named with its card
and the record's file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Rung:
    name: str
    knob: str               # what this rung adds to the one before it
    device_data: bool       # the data set resident on the device (DeviceLoader) vs a DataLoader
    channels_last: bool
    amp: bool               # autocast (bf16 where the GPU has it, else fp16 with a GradScaler)
    batch: int
    lr: float               # peak learning rate
    warmup_epochs: float    # linear warm-up from lr/10, then cosine to 0
    epochs: int             # the schedule's length (and the rung's cap)
    compile: bool
    workers: int = 2        # DataLoader worker processes (device_data=False only)
    compile_mode: str = "default"   # torch.compile's mode; "reduce-overhead" adds CUDA graphs

    def on(self, dev, note: bool = True) -> "Rung":
        """This rung as it runs on `dev`: no AMP on a CPU (with `note`, the knob says so)."""
        if getattr(dev, "type", str(dev)) == "cuda":
            return self
        rung = self
        if rung.compile_mode == "reduce-overhead":   # no CUDA graphs without CUDA
            rung = replace(rung, compile_mode="default", knob=rung.knob + " (no CUDA graphs on a "
                           "CPU: the default mode there)")
        if rung.amp:
            rung = replace(rung, amp=False, knob=rung.knob + (" (not on a CPU: fp32 there)"
                                                              if note else ""))
        return rung


_BASE = Rung("DataLoader", "a DataLoader with 2 workers, fp32 (the baseline)", False, False, False,
             128, 0.05, 0.0, 5, False)
_DEV = replace(_BASE, name="data on the device", device_data=True,
               knob="the data set resident on the device, crop and flip there")
_CL = replace(_DEV, name="+ channels_last", channels_last=True, knob="channels_last layout")
_AMP = replace(_CL, name="+ AMP", amp=True, knob="autocast: bf16 (fp16 below compute capability 8.0)")
_BATCH = replace(_AMP, name="+ batch 256", batch=256, lr=0.1, warmup_epochs=0.25,
                 knob="batch 256, learning rate x2 (linear scaling), 0.25-epoch warm-up")
_COMPILE = replace(_BATCH, name="+ torch.compile", compile=True, knob="torch.compile (default mode)")
_GRAPHS = replace(_COMPILE, name="+ CUDA graphs", compile_mode="reduce-overhead",
                  knob="torch.compile(mode='reduce-overhead'): each step's kernels replayed from "
                       "a CUDA graph, one launch instead of hundreds")
LADDER = (_BASE, _DEV, _CL, _AMP, _BATCH, _COMPILE, _GRAPHS)


def ladder_on(dev) -> list[Rung]:
    """LADDER as it runs on `dev`; only the rung that adds AMP says when there is none."""
    return [r.on(dev, note=not (k and LADDER[k - 1].amp)) for k, r in enumerate(LADDER)]


def describe(rung: Rung) -> str:
    """One line: every setting of the rung."""
    feed = "data on the device" if rung.device_data else f"DataLoader, {rung.workers} workers"
    return (f"{feed}, {'channels_last' if rung.channels_last else 'NCHW'}, "
            f"{'AMP' if rung.amp else 'fp32'}, batch {rung.batch}, lr {rung.lr}, warm-up "
            f"{rung.warmup_epochs} epochs, cosine over {rung.epochs} epochs, "
            f"{'compiled' if rung.compile else 'eager'}"
            f"{' (' + rung.compile_mode + ')' if rung.compile and rung.compile_mode != 'default' else ''}")


# ---------------------------------------------------------------- the record, for notebook 01
def _ladders(path: Path) -> list[dict]:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [m for m in record.get("measurements", []) if m.get("bench") == "time_to_accuracy_ladder"]


def record_ladder(folder=None):
    """(measurement, record path) of the newest record with a ladder run, or (None, why not)."""
    if folder is None:
        from dltutor.core.course import course_root
        folder = course_root().parent / "docs" / "verified"
    folder = Path(folder)
    records = sorted(folder.glob("*.json"), reverse=True) if folder.is_dir() else []
    for path in records:
        found = _ladders(path)
        if found:
            return found[-1], path
    why = (f"no GPU record with a time-to-accuracy ladder in {folder}" if folder.is_dir() else
           f"no GPU verification records here ({folder} is absent: they ship with the course's "
           "repository, not with an installed package)")
    return None, why


def _first_seeds(m: dict) -> list[dict]:
    """One run per rung (its first seed), in ladder order."""
    seen, out = set(), []
    for r in m["runs"]:
        if r["rung"] not in seen:
            seen.add(r["rung"])
            out.append(r)
    return out


def repeats(m: dict) -> list[dict]:
    """Every run of the last rung (the repeats with new seeds)."""
    last = m["runs"][-1]["rung"]
    return [r for r in m["runs"] if r["rung"] == last]


def ladder_rows(m: dict) -> list[dict]:
    """The ladder as table rows: seconds to the target, steps, img/s, the rung's share of the gain."""
    runs = _first_seeds(m)
    t = [r["seconds_to_target"] if r["reached"] else None for r in runs]
    gain = (t[0] - t[-1]) if t and t[0] is not None and t[-1] is not None else None
    rows, prev = [], None
    for r, sec in zip(runs, t):
        share = (None if gain is None or prev is None or sec is None or gain <= 0
                 else (prev - sec) / gain)
        rows.append({"rung": r["rung"], "adds": r["knob"], "batch": r["batch_size"],
                     "precision": r["precision"],
                     f"s to {m['target']:.0%}": sec if sec is not None else
                     f"not reached ({r['final_acc']:.3f})",
                     "steps": r["steps_to_target"] or "-", "img/s": r["img_per_s"],
                     "share of the gain": "-" if share is None else f"{share:.0%}",
                     "warm-up s (apart)": r["warmup_seconds"]})
        prev = sec
    return rows


def ladder_sentences(m: dict, source: Path) -> list[str]:
    """What the record's run showed, in sentences that name the card and the record."""
    runs, card = _first_seeds(m), m["device"]
    where = f"({card}, {m['torch'] and 'torch ' + m['torch']}; record {Path(source).name})"
    first, last = runs[0], runs[-1]
    out = []
    if not (first["reached"] and last["reached"]):
        missed = [r["rung"] for r in runs if not r["reached"]]
        return [f"On the {card} the target was not reached by: {', '.join(missed)} {where}."]
    out.append(f"On one {card}, {m['target']:.0%} test accuracy on the real {m['data']} took "
               f"{first['seconds_to_target']:.1f} s of training with the baseline "
               f"({first['rung']}) and {last['seconds_to_target']:.2f} s with every knob: "
               f"{first['seconds_to_target'] / last['seconds_to_target']:.1f} x faster {where}.")
    best = max((r for r in ladder_rows(m)[1:] if r["share of the gain"] != "-"),
               key=lambda r: float(r["share of the gain"].rstrip("%")), default=None)
    if best is not None:
        out.append(f"The largest share of that gain came from '{best['rung']}' "
                   f"({best['share of the gain']}). Times are read at evaluations every "
                   f"{m['eval_every_images']:,} training images ({m['eval_every_images'] / m['train_images']:.2g} "
                   "of an epoch), so a rung that reached the target one evaluation later shows that "
                   "much more time.")
    rep = [r["seconds_to_target"] for r in repeats(m) if r["reached"]]
    if len(rep) > 1:
        spread = (max(rep) - min(rep)) / min(rep)        # relative: rungs differ in scale
        small = [b["rung"] for a, b in zip(runs, runs[1:]) if a["reached"] and b["reached"]
                 and abs(b["seconds_to_target"] / a["seconds_to_target"] - 1) < spread]
        out.append(f"Each rung ran once; the last rung with {len(rep)} seeds took "
                   f"{', '.join(f'{s:.2f}' for s in rep)} s, {spread:.0%} apart"
                   + (f", so the change made by {', '.join(small)} is within that seed-to-seed "
                      "spread and cannot be told from noise" if small else "")
                   + f". Compiling took {last['warmup_seconds']:.0f} s before the clock started, "
                     "once.")
    return out
