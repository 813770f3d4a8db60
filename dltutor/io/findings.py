"""What notebook 07's measurements showed, in sentences built from their numbers
(dltutor.core.findings): every comparison carries the run's own spread and says "inconclusive
here" when the gap is inside it.

Spreads: a read pass's samples/s from the times between its batches (`measure.rate_spread`); a
run's wait share from its per-step shares (`starve.share_spread`).

* `formats(reads)`: cold small files vs cold shards, raw arrays vs PNG files (warm), cold vs warm;
* `workers(sweep)`: each num_workers against 0, each prefetch_factor against the smallest;
* `sharding(rows)`: every sample exactly once, file-level shards vs DistributedSampler per rank;
* `staging(staged)`: the copy, shared vs local reads, and whether staging can pay off here;
* `starving(timelines)`: each pipeline's wait share for the light and the heavy model;
* `exercise(timelines)`: per run, the time a batch took to arrive beside the step's compute.
"""
from __future__ import annotations

from dltutor.core.findings import compare, differs, fmt
from dltutor.io.starve import STARVED, share_spread, summary, wait_share

RATE = "samples/s"


def _rate(rows, **match):
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def _compare_rates(name_a, a, name_b, b) -> str:
    return compare(name_a, a["samples_per_s"], name_b, b["samples_per_s"], unit=RATE,
                   spread_a=a.get("spread_per_s", 0.0), spread_b=b.get("spread_per_s", 0.0))


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
            out.append(f"{fmt_}: " + _compare_rates("warm", warm, "cold", cold))
    out += [f"The {r['asked']} pass of {r['format']} found {r['resident_before']:.0%} of its files in RAM "
            f"({r['cache']}): read that row as {r['cache']}." for r in reads if r["cache"] != r["asked"]]
    return out


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
        avg = {m: {"samples_per_s": sum(r["samples_per_s"] for r in rs) / len(rs),
                   "spread_per_s": max(r.get("spread_per_s", 0.0) for r in rs)} for m, rs in mean.items()}
        out.append("Mean per rank: " + _compare_rates(modes[0], avg[modes[0]], modes[1], avg[modes[1]]))
    return out


def staging(staged: dict) -> list[str]:
    """Sentences on `bench.stage`: the copy, one cold pass from each place, the break-even."""
    c = staged["copy"]
    out = [f"Copy: {c['mb']:.2f} MB in {c['seconds']:.2f} s ({c['src']} -> {c['dst']}).",
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
            ra, rb = runs[f"{a} + {p}"], runs[f"{b} + {p}"]
            out.append(f"{p}: wait share " + compare(a, 100 * wait_share(ra), b, 100 * wait_share(rb), unit="%",
                                                     spread_a=100 * share_spread(ra), spread_b=100 * share_spread(rb)))
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


INCONCLUSIVE_LINE = "within the spread of the 50 % line (inconclusive here)"


def exercise(timelines: dict) -> list[str]:
    """Per run: how long a batch took to arrive beside the step's compute, and the verdict."""
    out = []
    for row, (name, rows) in zip(summary(timelines), timelines.items()):
        verdict = _starved(rows)
        out.append(f"{name}: a batch arrived after {fmt(row['wait_ms'], 'ms')} of waiting, the step "
                   f"computed {fmt(row['compute_ms'], 'ms')}; wait share {row['wait_share']:.0%} "
                   f"± {row['share_spread']:.0%} -> "
                   + (INCONCLUSIVE_LINE if verdict == "on the line" else verdict) + ".")
    starved = sorted(n for n, rows in timelines.items() if _starved(rows) == "starved")
    out.append("Starved in this run: " + (", ".join(starved) if starved else "none") + ".")
    return out
