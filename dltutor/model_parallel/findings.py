"""What notebook 06's runs showed, in sentences built from their numbers (dltutor.core.findings).

* `tp(rows)`: the TP checks (errors against the fp32 tolerance), all-reduces counted beside
  Megatron's one per block and direction, bytes beside the formula, and the timings (the mean
  of the lab's alternated runs ± its 95 % confidence interval; decided only beyond the two);
* `bubble(rows)`: per (p, schedule) how the measured bubble moves with m, how far it sits from
  (p-1)/(m+p-1) and whether that gap grows with m (spread: the 95 % confidence interval of the
  mean over the timed steps, `dltutor.core.spread`; one step gives none);
* `schedules(rows)`: 1F1B's bubble beside GPipe's at each m, against the two spreads;
* `real_compute(rows)`: the real-compute table as `bubble`, and beside 1 - 1/p (no overlap);
* `in_flight(rows)`: the most micro-batches a stage held, GPipe beside 1F1B (1F1B's point);
* `findings(tp_rows, bubble_rows)`: the short summary printed before the key takeaways.
"""
from __future__ import annotations

import math

from dltutor.core.findings import INCONCLUSIVE, against, compare, differs, fmt, trend

TOLERANCE = 1e-5      # fp32 rounding: the tolerance tests/test_model_parallel.py holds the checks to
BUBBLE_FLOOR = 0.02   # timer and scheduling jitter: a bubble within this of the formula "agrees"
FORMULA = "the formula (p-1)/(m+p-1)"


def tp(rows: list[dict], tolerance: float = TOLERANCE) -> list[str]:
    """Sentences on the TP table (`runs.tp_rows`)."""
    keys = ("out err", "grad err", "DTensor err", "ours vs DTensor")
    worst = max(rows, key=lambda r: max(r[k] for k in keys))
    err = max(worst[k] for k in keys)
    out = [f"Largest difference of any split block from the whole one: {err:.1e} ({worst['block']}, "
           f"{worst['ranks']} ranks) -- " + (f"below the fp32 tolerance {tolerance:g}: the split "
                                             "computes the same outputs and gradients."
                                             if err < tolerance else
                                             f"ABOVE the fp32 tolerance {tolerance:g}: the split "
                                             "does not match the whole block here.")]
    for r in rows:
        ours, torch_ = r["all-reduces fwd/bwd"], r["DTensor fwd/bwd"]
        one = "one per direction, as f and g predict" if ours == "1/1" else "NOT one per direction"
        same = "the same" if ours == torch_ else "a different count"
        size = ("equal to" if r["bytes each"] == r["formula bytes"] else "NOT equal to")
        out.append(f"{r['block']}, {r['ranks']} ranks: our layers made {ours} all-reduces (fwd/bwd), "
                   f"{one}; torch's DTensor plan made {torch_}, {same}. Each moved "
                   f"{r['bytes each']:,} B, {size} tokens x d_model x 4 B ({r['formula bytes']:,} B); "
                   f"{r['params/rank']:,} of {r['params whole']:,} parameters per rank.")
    return out + timings(rows)


def _speed(r: dict) -> tuple[str, int]:
    """One row's split-vs-whole sentence and its verdict: -1 split faster, 1 slower, 0 undecided.
    Each time is the mean of the lab's runs (split and whole alternated run by run) with its 95 %
    confidence interval; decided only when the gap is larger than the two combined."""
    a, b, sa, sb = r["ms split"], r["ms whole"], r["± split"], r["± whole"]
    said = compare("split", a, "whole", b, unit="ms", spread_a=sa, spread_b=sb)
    head = f"{r['block']} on {r['ranks']} ranks, mean of {r['runs']} alternated runs each: {said}"
    return head, (0 if not differs(a, b, sa, sb) else (-1 if a < b else 1))


def timings(rows: list[dict]) -> list[str]:
    """Split vs whole per block, then what the decided rows say about the all-reduces' cost."""
    said = [_speed(r) for r in rows]
    out = [s for s, _ in said]
    ways = {v for _, v in said if v}
    if ways == {-1}:
        out.append("Wherever decided, the split was faster: each rank computed 1/t of the block, so "
                   "its two all-reduces per block cost less than the compute the split saved -- on "
                   "this run they did not dominate the time.")
    elif ways == {1}:
        out.append("Wherever decided, the split was slower: its all-reduces (and the ranks' share "
                   "of the cores) cost more than the 1/t of the compute it saved.")
    elif ways:
        out.append("The split was faster for some blocks and slower for others: see each line.")
    return out


def _spread(row: dict) -> float:
    """The row's ± (95 % CI of its mean bubble); nan where the row has none: no interval."""
    return row.get("spread", float("nan"))


def _against(name: str, row: dict, expected: float, floor: float, source: str) -> str:
    """`against` with the larger of `floor` and the row's ±; without an interval (one step),
    INCONCLUSIVE: one value decides nothing."""
    if math.isnan(_spread(row)):
        return (f"{name}: {fmt(row['measured'])} measured vs {fmt(expected)} from {source}: {INCONCLUSIVE}, "
                "one timed step gives no interval.")
    return against(name, row["measured"], expected, tolerance=max(floor, _spread(row)), source=source)


def _groups(rows):
    for p in sorted({r["stages"] for r in rows}):
        for sched in ("gpipe", "1f1b"):
            pts = sorted((r for r in rows if r["stages"] == p and r["schedule"] == sched),
                         key=lambda r: r["m"])
            if pts:
                yield p, sched, pts


def bubble(rows: list[dict], floor: float = BUBBLE_FLOOR) -> list[str]:
    """Sentences on the bubble table (`runs.bubble_rows`, with its `spread` column)."""
    out = []
    for p, sched, pts in _groups(rows):
        ms, spreads = [r["m"] for r in pts], [_spread(r) for r in pts]
        out.append(trend(f"{sched} measured bubble (p={p})", ms, [r["measured"] for r in pts],
                         x_name="m", spreads=spreads))
        if len(pts) > 1:
            out.append(trend(f"{sched} gap to {FORMULA} (measured - formula, p={p})", ms,
                             [r["measured"] - r["formula"] for r in pts], x_name="m", spreads=spreads))
        last = pts[-1]
        out.append(_against(f"{sched} bubble at m={last['m']} (p={p})", last, last["formula"], floor, FORMULA))
    return out


def schedules(rows: list[dict]) -> list[str]:
    """1F1B's bubble beside GPipe's at each m both ran, per p. With equal stages the formula gives
    both the same bubble; this says whether the run did, against the two rows' spreads."""
    out = []
    for p in sorted({r["stages"] for r in rows}):
        by = {sched: {r["m"]: r for r in pts} for q, sched, pts in _groups(rows) if q == p}
        ms = sorted(set(by.get("gpipe", {})) & set(by.get("1f1b", {})))
        if not ms:
            continue
        lower, higher = [], []
        for m in ms:
            f, g = by["1f1b"][m], by["gpipe"][m]
            if differs(f["measured"], g["measured"], _spread(f), _spread(g)):
                (lower if f["measured"] < g["measured"] else higher).append(f"m={m}")
        points = ", ".join(f"{by['1f1b'][m]['measured']:.3g} vs {by['gpipe'][m]['measured']:.3g} "
                           f"at m={m}" for m in ms)
        verdict = "; ".join(x for x in (
            f"1F1B lower beyond the spreads at {', '.join(lower)}" if lower else "",
            f"1F1B higher beyond the spreads at {', '.join(higher)}" if higher else "") if x)
        out.append(f"1F1B vs GPipe bubble, p={p} ({points}; {FORMULA} gives both the same): "
                   + (verdict + "." if verdict else f"no gap beyond the spreads ({INCONCLUSIVE})."))
    return out


def real_compute(rows: list[dict], floor: float = BUBBLE_FLOOR) -> list[str]:
    """The bubble table of the real-compute run: as `bubble`, and each schedule's bubble at the
    largest m beside 1 - 1/p, what stages that never work at the same time would show."""
    out = bubble(rows, floor)
    for p, sched, pts in _groups(rows):
        last = pts[-1]
        out.append(_against(f"{sched} bubble with real compute at m={last['m']} (p={p})", last, 1 - 1 / p,
                            floor, "1 - 1/p, the bubble of stages that never work at the same time"))
    return out


PREDICTED = {"gpipe": ("m", lambda m, p: m), "1f1b": ("min(m, p)", lambda m, p: min(m, p))}


def in_flight(rows: list[dict]) -> list[str]:
    """1F1B's point, from the `max in flight` column: micro-batches a stage held at once."""
    out = []
    for p in sorted({r["stages"] for r in rows}):
        held = {sched: [(r["m"], r["max in flight"]) for r in pts]
                for q, sched, pts in _groups(rows) if q == p}
        text = []
        for sched, pairs in held.items():
            name, rule = PREDICTED[sched]
            kept = all(n == rule(m, p) for m, n in pairs)
            text.append(f"{sched} held " + ", ".join(f"{n} at m={m}" for m, n in pairs)
                        + (f" (= {name} in every run)" if kept else f" (not always {name})"))
        line = f"Most micro-batches a stage held at once, p={p}: " + "; ".join(text) + "."
        if len(held) == 2:
            m, g = held["gpipe"][-1]
            f = dict(held["1f1b"]).get(m)
            if f is not None:
                line += (f" At m={m}, 1F1B held {g / f:.2g}x fewer activations than GPipe." if f < g
                         else f" At m={m}, 1F1B held no fewer than GPipe ({f} vs {g}).")
        out.append(line)
    return out


def findings(tp_rows: list[dict], bubble_rows: list[dict]) -> list[str]:
    """The summary before the key takeaways: TP exactness, the GPipe bubble's trend, 1F1B's memory."""
    gpipe = [r for r in bubble_rows if r["schedule"] == "gpipe"] or bubble_rows
    return [tp(tp_rows)[0], *(s for s in bubble(gpipe) if "measured bubble" in s),
            *schedules(bubble_rows), *in_flight(bubble_rows)]
