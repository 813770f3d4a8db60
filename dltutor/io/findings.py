"""What notebook 07's measurements showed, in sentences built from their numbers
(dltutor.core.findings): every comparison carries the run's own spread and says "inconclusive
here" when the gap is inside it.

Every "±" is a 95 % confidence interval (`dltutor.core.spread`): of a read pass's samples/s from
the times between its batches (`measure.rate_spread`), of a run's wait, compute and wait share from
its per-step values (`starve.share_spread`, ...). A pass or run without one (nan: fewer than two
batches or steps) decides nothing.

* `formats(reads)`: cold small files vs cold shards, raw arrays vs PNG files (warm), cold vs warm;
* `workers(sweep)`: each num_workers against 0, each prefetch_factor against the smallest;
* `sharding(rows)`: every sample exactly once, file-level shards vs DistributedSampler per rank;
* `staging(staged)`: the copy, shared vs local reads, and whether staging can pay off here;
* `starving(timelines)`: each pipeline's wait share for the light and the heavy model;
* `exercise(timelines)`: per run, the time a batch took to arrive beside the step's compute.
"""
from __future__ import annotations

import math

from dltutor.core.findings import INCONCLUSIVE, compare, differs, fmt
from dltutor.core.spread import combined
from dltutor.io.starve import (STARVED, compute_ms, compute_ms_spread, share_spread, summary, wait_ms,
                               wait_ms_spread, wait_share)

RATE = "samples/s"
NAN = float("nan")   # no interval


def _rate(rows, **match):
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def _compare_rates(name_a, a, name_b, b) -> str:
    return compare(name_a, a["samples_per_s"], name_b, b["samples_per_s"], unit=RATE,
                   spread_a=a.get("spread_per_s", NAN), spread_b=b.get("spread_per_s", NAN))


def formats(reads: list[dict]) -> list[str]:
    """Sentences on `bench.read_formats` rows (one pass per format and cache state)."""
    out = []
    row = lambda fmt_, cache: _rate(reads, format=fmt_, asked=cache)  # noqa: E731
    files, shards = row("files", "cold"), row("shards", "cold")
    if files and shards:
        out.append("Cold: " + _compare_rates("shards", shards, "small files", files))
    warm_files = row("files", "warm")
    for raw in ("memmap", "hdf5"):
        if warm_files and row(raw, "warm"):
            out.append("Warm: " + _compare_rates(raw, row(raw, "warm"), "small files (PNG)", warm_files))
    for fmt_ in dict.fromkeys(r["format"] for r in reads):
        cold, warm = row(fmt_, "cold"), row(fmt_, "warm")
        if cold and warm:
            out.append(f"{fmt_}: " + _warm_vs_cold(warm, cold))
    out += [f"The {r['asked']} pass of {r['format']} found {r['resident_before']:.0%} of its files in RAM "
            f"({r['cache']}): read that row as {r['cache']}." for r in reads if r["cache"] != r["asked"]]
    return out


def _warm_vs_cold(warm: dict, cold: dict) -> str:
    """Warm against cold. A warm page cache only takes device reads away, so a warm pass slower
    than the cold one beyond the spreads is not an effect: it shows the passes varying more than
    their within-pass spreads say."""
    said = _compare_rates("warm", warm, "cold", cold)
    sa, sb = warm.get("spread_per_s", NAN), cold.get("spread_per_s", NAN)
    if warm["samples_per_s"] >= cold["samples_per_s"] or not differs(warm["samples_per_s"],
                                                                     cold["samples_per_s"], sa, sb):
        return said
    return (f"warm {fmt(warm['samples_per_s'], RATE)} vs cold {fmt(cold['samples_per_s'], RATE)}: warm "
            "was slower, which a page cache cannot cause (it only takes device reads away), so this "
            f"gap is noise between two passes, larger than their within-pass spreads (±{fmt(sa)} and "
            f"±{fmt(sb)}): {INCONCLUSIVE}, no effect of the cache.")


def sizes(rows: list[dict]) -> list[str]:
    """Sentences on `bench.sizes`: the bytes each format holds beside the space it takes."""
    out = []
    for r in rows:
        ratio = r["allocated_mb"] / r["apparent_mb"] if r["apparent_mb"] else float("nan")
        out.append(f"{r['format']}: {r['files']:,} file(s) hold {r['apparent_mb']:.3g} MB and take "
                   f"{r['allocated_mb']:.3g} MB on the device ({ratio:.2f}x; "
                   f"{1e3 * r['allocated_mb'] / max(r['files'], 1):,.1f} kB allocated per file).")
    return out


def repeats(rows: list[dict]) -> list[str]:
    """The same configuration (format, split, workers, batch size, cache state) read more than once
    in one notebook: how far its passes lie apart, beside each pass's own spread. A gap between
    two single passes smaller than that is machine noise, not an effect."""
    groups = {}
    for r in rows:
        key = (r["format"], r.get("how"), r["workers"], r.get("batch_size"), r["cache"],
               r.get("prefetch") if r["workers"] else None)   # prefetch_factor needs workers
        mine = groups.setdefault(key, [])
        if not any(r["seconds"] == q["seconds"] for q in mine):   # a row shown twice is one pass
            mine.append(r)
    out = []
    for (fmt_, how, w, batch, cache, _), passes in groups.items():
        if len(passes) < 2:
            continue
        rates = [p["samples_per_s"] for p in passes]
        spreads = [p.get("spread_per_s", NAN) for p in passes]
        hi, lo = passes[rates.index(max(rates))], passes[rates.index(min(rates))]
        gap = max(rates) - min(rates)
        if any(math.isnan(x) for x in spreads):
            out.append(f"{fmt_} ({how}, {w} workers, batch {batch}, {cache}) was read {len(passes)} times: "
                       + ", ".join(fmt(x, RATE) for x in rates) + f", up to {fmt(gap, RATE)} apart; a pass "
                       f"too short for an interval (± n/a) leaves the noise between passes {INCONCLUSIVE}.")
            continue
        out.append(f"{fmt_} ({how}, {w} workers, batch {batch}, {cache}) was read {len(passes)} times: "
                   + ", ".join(fmt(x, RATE) for x in rates)
                   + f". The passes lie up to {fmt(gap, RATE)} ({gap / min(rates):.0%}) apart, while "
                   f"each pass's own ± (95 % CI) was ±{fmt(min(spreads))} to ±{fmt(max(spreads))}"
                   + (": passes minutes apart vary more than one pass's interval says, so a gap "
                      f"between two single passes below {fmt(gap, RATE)} is not an effect here."
                      if differs(max(rates), min(rates), hi.get("spread_per_s", NAN),
                                 lo.get("spread_per_s", NAN)) else ": the passes agree within their intervals."))
    return out or ["No configuration was read more than once here: no repeat to compare."]


def workers(sweep: list[dict]) -> list[str]:
    """Sentences on `bench.worker_sweep` rows (num_workers x prefetch_factor, one pass each)."""
    pfs = sorted({r["prefetch"] for r in sweep})
    base = _rate(sweep, workers=0, prefetch=pfs[0])
    out = []
    for w in sorted({r["workers"] for r in sweep} - {0}):
        out.append(_compare_rates(f"{w} workers", _rate(sweep, workers=w, prefetch=pfs[0]), "0 workers", base))
        for pf in pfs[1:]:
            out.append(f"{w} workers: " + _compare_rates(f"prefetch_factor={pf}", _rate(sweep, workers=w, prefetch=pf),
                                                         f"prefetch_factor={pfs[0]}",
                                                         _rate(sweep, workers=w, prefetch=pfs[0])))
    ttfb = ", ".join(f"{1e3 * r['ttfb_s']:.0f} ms with {r['workers']} workers"
                     for r in sweep if r["prefetch"] == pfs[0])
    out.append(f"Time to the first batch (one pass each, no spread): {ttfb}.")
    return out


def sharding(rows: list[dict]) -> list[str]:
    """Sentences on the lab's per-rank rows (`runs.rows`)."""
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    out = []
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        once = all(r["exactly_once"] for r in mine)
        out.append(f"{mode}: samples per rank " + ", ".join(str(r["samples"]) for r in mine) + "; "
                   + ("every sample read exactly once." if once else "NOT every sample exactly once."))
    if len(modes) == 2:
        mean = {m: [r for r in rows if r["mode"] == m] for m in modes}
        avg = {m: {"samples_per_s": sum(r["samples_per_s"] for r in rs) / len(rs),   # ranks independent:
                   "spread_per_s": combined(*(r.get("spread_per_s", NAN) for r in rs)) / len(rs)}
               for m, rs in mean.items()}
        kind = {m: "/".join(dict.fromkeys(str(r.get("format")) for r in rs)) for m, rs in mean.items()}
        line = "Mean per rank: " + _compare_rates(f"{modes[0]} ({kind[modes[0]]})", avg[modes[0]],
                                                  f"{modes[1]} ({kind[modes[1]]})", avg[modes[1]])
        if kind[modes[0]] != kind[modes[1]]:
            line += (f" The two read different formats ({kind[modes[0]]} vs {kind[modes[1]]}), so this "
                     "gap mixes the format with the way of sharding: it is no verdict on sharding "
                     "(the format alone: section 2's single-process rows).")
        out.append(line)
    return out


def staging(staged: dict) -> list[str]:
    """Sentences on `bench.stage`: the copy, one cold pass from each place, the break-even."""
    c = staged["copy"]
    out = [f"Copy: {c['mb']:.2f} MB (apparent size) in {c['seconds']:.2f} s ({c['src']} -> {c['dst']}).",
           "Cold pass: " + _compare_rates("local", staged["local"], "shared", staged["shared"])]
    if c["same_device"]:
        out.append("Both folders are on the SAME device here: whatever gap the line above shows is "
                   "not staging's doing, and no break-even can be computed.")
    else:
        be = staged["break_even_epochs"]
        out.append(f"Staging pays off after {be:.1f} epochs (copy time / seconds saved per pass)." if be else
                   "Staging never pays off here: the local pass was not faster than the shared one.")
    return out


def _starved(rows) -> str:
    share, spread = wait_share(rows), share_spread(rows)
    if not differs(share, STARVED, spread):
        return "on the line"
    return "starved" if share > STARVED else "fed"


def starving(timelines: dict) -> list[str]:
    """Sentences on `bench.timelines` over models x pipelines: each pipeline's wait share per model
    (compared with the spreads), and which runs waited for data more than half of each step."""
    runs = timelines
    models = list(dict.fromkeys(n.split(" + ")[0] for n in runs))
    pipes = list(dict.fromkeys(n.split(" + ")[1] for n in runs))
    out = []
    if len(models) >= 2:
        a, b = models[:2]
        for p in pipes:
            out += _wait_both_ways(p, a, runs[f"{a} + {p}"], b, runs[f"{b} + {p}"])
    state = {n: _starved(rows) for n, rows in runs.items()}
    for m in models:
        mine = [p for p in pipes if state[f"{m} + {p}"] == "starved"]
        line = [p for p in pipes if state[f"{m} + {p}"] == "on the line"]
        out.append(f"{m} model: starved (wait > {STARVED:.0%} of the step) on {len(mine)} of {len(pipes)} pipelines"
                   + (f" ({', '.join(mine)})" if mine else "")
                   + (f"; {INCONCLUSIVE_LINE} for {', '.join(line)}" if line else "") + ".")
    split = [p for p in pipes if len({state[f"{m} + {p}"] for m in models} - {"on the line"}) > 1]
    out.append("The same pipeline starved one model and fed another: " + ", ".join(split) + "." if split else
               "No pipeline here clearly starved one model and fed another.")
    return out


def _ratio(a: float, b: float, sa: float, sb: float) -> str:
    if math.isnan(sa) or math.isnan(sb):
        return NO_INTERVAL
    return f"{a / b:.3g}x" if b and differs(a, b, sa, sb) else INSIDE


INSIDE, NO_INTERVAL = "inside the spreads", "no interval: too few steps"


def _parts(rows) -> dict:
    """A run's wait per step (ms), compute per step (ms) and wait share (%), each with its spread."""
    return {"wait": (wait_ms(rows), wait_ms_spread(rows)),
            "compute": (compute_ms(rows), compute_ms_spread(rows)),
            "share": (100 * wait_share(rows), 100 * share_spread(rows))}


def _two_runs(head: str, ra, rb, same_model: bool = False) -> str:
    """Run a against run b in absolute wait, compute and share (a/b, or inside the spreads), and
    what the share hides: a share can move only because the compute moved. `same_model`: the two
    runs trained the same model, whose compute should not differ."""
    pa, pb = _parts(ra), _parts(rb)
    said = {k: _ratio(pa[k][0], pb[k][0], pa[k][1], pb[k][1]) for k in pa}
    line = (f"{head}: wait per step {fmt(pa['wait'][0], 'ms')} vs {fmt(pb['wait'][0], 'ms')} ({said['wait']}), "
            f"compute {fmt(pa['compute'][0], 'ms')} vs {fmt(pb['compute'][0], 'ms')} ({said['compute']}), "
            f"wait share {pa['share'][0]:.3g}% vs {pb['share'][0]:.3g}% ({said['share']})")
    sign = lambda k: 0 if said[k] in (INSIDE, NO_INTERVAL) else (1 if pa[k][0] > pb[k][0] else -1)  # noqa: E731
    notes = []
    if sign("share") and sign("wait") != sign("share"):
        notes.append("the share moved while the wait per step did not move with it -- the compute did, "
                     "so the shares alone would misread the pipeline")
    if same_model and sign("compute"):
        notes.append(f"the same model computed {said['compute']} as long per step here: the model "
                     "did not change, so something else did (loader workers or other work taking the "
                     "cores, or noise), and that moves the share too")
    return line + (": " + "; ".join(notes) if notes else "") + "."


def _wait_both_ways(pipe: str, a: str, ra, b: str, rb) -> list[str]:
    """One pipeline feeding two models, in absolute wait and compute as well as in shares."""
    return [f"{pipe}: wait share " + compare(a, 100 * wait_share(ra), b, 100 * wait_share(rb), unit="%",
                                             spread_a=100 * share_spread(ra), spread_b=100 * share_spread(rb)),
            _two_runs(f"{pipe}, {a} vs {b}", ra, rb)]


def pipelines(timelines: dict) -> list[str]:
    """Per model, each pipeline against the first one: wait per step, compute and share. The same
    model's compute should not depend on its pipeline; when it does (workers taking cores, a busy
    machine), the share moves without the pipeline changing."""
    models = list(dict.fromkeys(n.split(" + ")[0] for n in timelines))
    pipes = list(dict.fromkeys(n.split(" + ")[1] for n in timelines))
    return [_two_runs(f"{m}, {p} vs {pipes[0]}", timelines[f"{m} + {p}"], timelines[f"{m} + {pipes[0]}"],
                      same_model=True)
            for m in models for p in pipes[1:] if f"{m} + {p}" in timelines]


INCONCLUSIVE_LINE = "within the spread of the 50 % line (inconclusive here)"


def exercise(timelines: dict) -> list[str]:
    """Per run: how long a batch took to arrive beside the step's compute, and the verdict."""
    out = []
    for row, (name, rows) in zip(summary(timelines), timelines.items()):
        verdict = _starved(rows)
        out.append(f"{name}: a batch arrived after {fmt(row['wait_ms'], 'ms')} of waiting, the step "
                   f"computed {fmt(row['compute_ms'], 'ms')}; wait share {row['wait_share']:.0%} "
                   f"±{fmt(100 * row['share_spread'], '%')} -> "
                   + (INCONCLUSIVE_LINE if verdict == "on the line" else verdict) + ".")
    starved = sorted(n for n, rows in timelines.items() if _starved(rows) == "starved")
    out.append("Starved in this run: " + (", ".join(starved) if starved else "none") + ".")
    return out
