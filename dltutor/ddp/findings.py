"""What notebook 02's runs show, as sentences built from their numbers (`dltutor.core.findings`).

A spread ("±") is the 95 % confidence interval of the mean compared (`dltutor.core.spread`): over
the timed steps of the slowest rank (lab 02's `step_times_ms`, warm-up already left out) for
throughputs and step times, over ranks x profiled steps for the timeline's terms; an efficiency's
combines those of its two rates. A difference inside the spreads is reported as "inconclusive here".

* `step_row(label, metrics)`: one launch as a row: mean step time of the slowest rank, its 95 % CI.
* `scaling(table)`: weak and strong scaling efficiency against 1.0 and against each other.
* `buckets(rows)`: which bucket setting stepped fastest; whether no overlap beat the lab's buckets
  (`bucket_label`: sizes in MiB; `lab_buckets_note`: the lab's explicit 25 is not DDP's default).
* `lab_agreement(pair)`: lab 02 on W ranks against the one-process sweep (section 3): a verdict,
  agree / differ, on the first steps' losses, where the two must agree.
* `overlap_table(rows)` and `overlap(table)`: the iteration-time model's terms per variant
  (`dltutor.ddp.timeline`) and the overlap fraction.
"""
from __future__ import annotations

from dltutor.core import spread as ci
from dltutor.core.findings import INCONCLUSIVE, against, compare, differs, fmt


def _pm(h: float) -> str:
    """'± 0.12', or '± n/a' where one value gave no interval."""
    return f"± {h:.2f}" if ci.decided(h) else "± n/a"


def slowest(metrics: list[dict]) -> dict:
    """The rank whose timed steps took longest in total (it sets the global img/s)."""
    return max(metrics, key=lambda m: sum(m.get("step_times_ms") or [m.get("step_time_ms") or 0]))


def rate_spread(global_batch: int, step_times_ms) -> float:
    """95 % CI (half-width) of the mean per-step rate global_batch / t (img/s); nan below 2 steps."""
    return ci.mean_ci([1e3 * global_batch / t for t in step_times_ms or [] if t > 0])


def step_row(label: str, metrics: list[dict]) -> dict:
    """A launch of lab 02 as one row: mean step time (ms) of the slowest rank and its 95 % CI."""
    m = slowest(metrics)
    times = m.get("step_times_ms") or [m["step_time_ms"]]
    return {"label": label, "step_time_ms": sum(times) / len(times), "spread_ms": ci.mean_ci(times),
            "timed_steps": len(times), "global_img_per_s": metrics[0]["global_img_per_s"],
            "hardware": m["hardware"]}


# ---------------------------------------------------------------- section 2: scaling efficiency
def _eff_spread(row: dict, base: dict) -> float:
    """± of efficiency = P / (P_base x scale): the relative CIs of P and P_base in quadrature
    (`core.spread.combined`); nan when either rate has no interval."""
    def rel(r):
        h = r.get("rate_spread")
        return float("nan") if h is None else h / r["global_img_per_s"]
    return row["efficiency"] * ci.combined(rel(row), rel(base))


def scaling(table: list[dict]) -> list[str]:
    """Sentences on `dltutor.ddp.scaling.scaling_table` rows (with `summarize`'s `rate_spread`)."""
    out, eff = [], {}
    for kind in ("weak", "strong"):
        group = sorted((r for r in table if r["scaling"] == kind), key=lambda r: r["world_size"])
        if len(group) < 2:
            continue
        base = group[0]
        for r in group[1:]:
            e, de = r["efficiency"], _eff_spread(r, base)
            eff.setdefault(kind, (e, de, r["world_size"]))
            w = r["world_size"] // base["world_size"]
            head = (f"{kind} scaling, {r['world_size']} ranks x b={r['per_rank_batch']} ({r['hardware']}): "
                    f"{fmt(r['global_img_per_s'], 'img/s')} vs {w} x {fmt(base['global_img_per_s'], 'img/s')} "
                    f"of {base['world_size']} rank x b={base['per_rank_batch']}, efficiency {e:.2f} {_pm(de)}")
            if not differs(e, 1.0, de):
                out.append(f"{head}: {INCONCLUSIVE} whether it falls short of the ideal 1.0 "
                           + ("(one timed step gives no interval)." if de != de else "(its 95 % CI covers it)."))
            else:
                out.append(f"{head}: {'below' if e < 1 else 'above'} the ideal 1.0 beyond its 95 % CI; "
                           f"{r['world_size']} ranks ran at {r['speedup']:.2f}x the throughput of "
                           f"{base['world_size']} (ideal: {w}x).")
    if "weak" in eff and "strong" in eff:
        (ew, dw, _), (es, ds, _) = eff["weak"], eff["strong"]
        out.append(compare("strong-scaling efficiency", es, "weak-scaling efficiency", ew,
                           spread_a=ds, spread_b=dw))
    return out


# ---------------------------------------------------------------- section 3: the lab against one process
FIRST_STEPS = 10    # the verdict's steps: same weights, images and LR, before differences can grow
LOSS_TOL = 2e-4     # float rounding of one batch of B against W ranks' mean over B / W each


def _parting(a: list, b: list, tol: float):
    """(step counted from 1, |difference|) of the first step whose losses differ by more than `tol`
    (a NaN on either side counts as a difference)."""
    return next(((i + 1, abs(x - y)) for i, (x, y) in enumerate(zip(a, b)) if not abs(x - y) <= tol), None)


def first_steps_verdict(one: list, ranks: list, first: int = FIRST_STEPS, tol: float = LOSS_TOL) -> list[str]:
    """The verdict on the first `first` steps' losses, where the two runs must agree, and where the
    two curves part after them (if they do)."""
    n = min(first, len(one), len(ranks))
    head = (f"Verdict on the first {n} steps' losses, where the two runs must agree (same first weights, "
            f"same images in each global batch, same LR), tolerance ±{tol:g}: ")
    part = _parting(one, ranks, tol)
    if part and part[0] <= n:
        return [head + f"they DIFFER: at step {part[0]} the losses are {part[1]:.2g} apart, so the "
                "ranks did not take the one process's SGD steps."]
    worst = max(abs(x - y) for x, y in zip(one[:n], ranks[:n]))
    lines = [head + f"they AGREE (largest difference {worst:.1g}): the ranks took the one process's SGD steps."]
    m = min(len(one), len(ranks))
    lines.append(f"The loss curves stay within ±{tol:g} for all {m} steps." if not part else
                 f"The loss curves part at step {part[0]} of {m} ({part[1]:.2g} apart): from there on they "
                 "are two different trajectories, so the end-of-budget numbers below compare two runs that "
                 "have split and are no test of the lab.")
    return lines


def lab_agreement(pair: list[dict], loss_tol: float = 1e-3) -> list[str]:
    """`batch_report.compare_with_lab` rows (one process, then the ranks): a verdict on the first
    steps' losses (`first_steps_verdict`), then the end of the budget, loss and test accuracy.

    Float rounding differs between one process and W ranks summing over their shards; `loss_tol`
    is the threshold on the final loss, and the test accuracy may differ by one image per thousand."""
    one, ranks = pair
    src = "the one-process sweep"
    lines = (first_steps_verdict(one["loss_curve"], ranks["loss_curve"])
             if one.get("loss_curve") and ranks.get("loss_curve") else
             ["No per-step loss curves to compare: no verdict on the first steps."])
    lines.append("At the end of the budget: " + against(
        f"final loss of {ranks['run']}", ranks["final_loss"], one["final_loss"], tolerance=loss_tol, source=src))
    if one["test_acc"] is not None and ranks["test_acc"] is not None:
        lines.append(against("test accuracy", ranks["test_acc"], one["test_acc"], tolerance=1e-3, source=src))
    if (one["steps"], one["global_batch"]) != (ranks["steps"], ranks["global_batch"]):
        lines.append(f"not the same run: {ranks['steps']} steps of {ranks['global_batch']} images on the "
                     f"ranks vs {one['steps']} of {one['global_batch']} in one process.")
    return lines


# ---------------------------------------------------------------- section 4: buckets and overlap
LAB_BUCKET_MB = 25   # lab 02's --bucket-cap-mb default, passed to DDP explicitly


def bucket_label(mb: float) -> str:
    """A bucket variant's label: DDP's `bucket_cap_mb` is in MiB (2**20 bytes)."""
    return f"bucket_cap_mb={mb:g} (MiB)"


def lab_buckets_note() -> str:
    """What the lab's explicit bucket_cap_mb=25 is, against DDP's own default (None), read from the
    installed torch (`DistributedDataParallel` keeps a smaller first bucket only when it is None)."""
    import torch
    import torch.distributed as dist
    first = dist._DEFAULT_FIRST_BUCKET_BYTES / 2 ** 20
    return (f"{bucket_label(LAB_BUCKET_MB)} is the lab's setting, not DDP's default: the lab passes "
            f"bucket_cap_mb={LAB_BUCKET_MB} explicitly, so every bucket, the first too, holds up to "
            f"{LAB_BUCKET_MB} MiB; DDP left at bucket_cap_mb=None caps its first bucket at {first:g} MiB "
            f"(torch.distributed._DEFAULT_FIRST_BUCKET_BYTES) and the others at 25 MiB "
            f"(torch {torch.__version__}). That default was not run here.")


def buckets(rows: list[dict], default: str = bucket_label(LAB_BUCKET_MB)) -> list[str]:
    """Which variant stepped fastest (or inconclusive), no overlap against the lab's buckets
    (`default`, the lab's bucket_cap_mb=25), and what those buckets are (`lab_buckets_note`)."""
    rows = sorted(rows, key=lambda r: r["step_time_ms"])
    best, second = rows[0], rows[1]
    gap = differs(best["step_time_ms"], second["step_time_ms"], best["spread_ms"], second["spread_ms"])
    lines = [(f"fastest step here: {best['label']}; " if gap else
              "no variant stepped fastest beyond the run's spread; the two fastest: ") + compare(
        best["label"], best["step_time_ms"], second["label"], second["step_time_ms"], unit="ms",
        spread_a=best["spread_ms"], spread_b=second["spread_ms"])]
    by = {r["label"]: r for r in rows}
    noov = next((r for r in rows if r["label"].startswith("no overlap")), None)
    if noov and default in by:
        d = by[default]
        text = compare("no overlap", noov["step_time_ms"], default, d["step_time_ms"], unit="ms",
                       spread_a=noov["spread_ms"], spread_b=d["spread_ms"])
        if differs(noov["step_time_ms"], d["step_time_ms"], noov["spread_ms"], d["spread_ms"]):
            text += (" Overlap paid off in this run." if noov["step_time_ms"] > d["step_time_ms"] else
                     " In this run no overlap was faster; on a CPU one likely reason is that the all-reduce "
                     "threads need the same cores as backward (the timeline below shows how much was hidden).")
        lines.append(text)
    lines.append(f"({best['hardware']}; {min(r['timed_steps'] for r in rows)} timed steps per variant, "
                 "± is the 95 % confidence interval of the mean step time of the slowest rank.)")
    if default in by:
        lines.append(lab_buckets_note())
    return lines


TERMS = ("t_iter_ms", "t_forward_ms", "t_backward_ms", "t_comm_ms", "t_overlap_ms", "t_other_ms")


def overlap_table(rows: list[dict]) -> list[dict]:
    """Per variant (`label`): the mean of each term over ranks x profiled steps, and the overlap
    fraction with its 95 % CI over ranks x profiled steps (`core.spread.mean_ci`)."""
    out = []
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        row = {"label": label, **{k: sum(r[k] for r in mine) / len(mine) for k in TERMS}}
        fr = [r["overlap_fraction"] for r in mine]
        row.update(overlap_fraction=sum(fr) / len(fr), fraction_spread=ci.mean_ci(fr),
                   buckets=max(r["buckets"] for r in mine), samples=len(mine))
        out.append(row)
    return out


def overlap(table: list[dict], no_overlap: str = "no overlap") -> list[str]:
    """Sentences on `overlap_table`: each variant's fraction, the highest against the rest, the
    no-overlap control against 0, and how much of the step the model's terms account for."""
    lines = ["overlap fraction (T_overlap / T_comm, mean over ranks x profiled steps): " + ", ".join(
        f"{r['label']} {r['overlap_fraction']:.2f} {_pm(r['fraction_spread'])} "
        f"({r['buckets']} all-reduce{'s' if r['buckets'] != 1 else ''} per step)" for r in table) + "."]
    ranked = sorted(table, key=lambda r: -r["overlap_fraction"])
    top, rest = ranked[0], ranked[1:]
    for r in rest:
        a, b, sa, sb = top["overlap_fraction"], r["overlap_fraction"], top["fraction_spread"], r["fraction_spread"]
        head = f"{top['label']} ({a:.2f} {_pm(sa)}) against {r['label']} ({b:.2f} {_pm(sb)})"
        lines.append(f"{head}: {INCONCLUSIVE}, the spreads cover the gap." if not differs(a, b, sa, sb) else
                     f"{head}: {top['label']} hid a larger share of its all-reduce behind backward (+{a - b:.2f}).")
    ctrl = next((r for r in table if r["label"].startswith(no_overlap)), None)
    if ctrl:
        hidden = ctrl["overlap_fraction"] > 0.05
        lines.append(f"control, {ctrl['label']}: overlap fraction {ctrl['overlap_fraction']:.2f}, "
                     + ("above 0: some all-reduce ran during backward, which --no-overlap should prevent."
                        if hidden else "0 as it must be: its one all-reduce starts after backward."))
    cover = ", ".join(f"{r['label']} {(r['t_iter_ms'] - r['t_other_ms']) / r['t_iter_ms']:.0%} of "
                      f"{r['t_iter_ms']:.0f} ms" for r in table if r["t_iter_ms"] > 0)
    lines.append(f"T_forward + T_backward + T_comm - T_overlap accounts for {cover}; the rest "
                 "(T_other) is the optimizer step, waiting for the other rank and gaps between ops.")
    return lines
