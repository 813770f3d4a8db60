"""What notebook 06's pipeline runs showed, in sentences built from their numbers.

Every sentence names the stage work it was measured on (`work`: the SLEEP stand-in or the real
compute). A change with m is decided between the first and the last m, against the two points'
95 % intervals combined; the steps in between are listed, and only called decided when each is.
GPipe and 1F1B ran interleaved step by step at each m (step i of each a pair), so they are
compared with a PAIRED interval: the 95 % CI of the mean of the pairs' differences.
"""
from __future__ import annotations

import math

from dltutor.core.findings import INCONCLUSIVE, against, differs, fmt
from dltutor.core.spread import mean_and_ci

BUBBLE_FLOOR = 0.02   # timer and scheduling jitter: a bubble within this of the formula "agrees"
FORMULA = "the formula (p-1)/(m+p-1)"


def _spread(row: dict) -> float:
    """The row's ± (95 % CI of its mean bubble); nan where the row has none: no interval."""
    return row.get("spread", float("nan"))


def _tag(work: str) -> str:
    return f"[{work}] " if work else ""


def _groups(rows):
    for p in sorted({r["stages"] for r in rows}):
        for sched in ("gpipe", "1f1b"):
            pts = sorted((r for r in rows if r["stages"] == p and r["schedule"] == sched),
                         key=lambda r: r["m"])
            if pts:
                yield p, sched, pts


def ends(name: str, ms, ys, spreads) -> str:
    """How `name` changed from the first m to the last, decided against the two points'
    intervals combined; every point listed, and whether each step in between is decided too."""
    points = ", ".join(f"{fmt(y)} at m={m}" for m, y in zip(ms, ys))
    if any(isinstance(s, float) and math.isnan(s) for s in spreads):
        return f"{name}: {points} ({INCONCLUSIVE}: a point measured once has no interval)."
    gap, both = ys[-1] - ys[0], math.hypot(spreads[0], spreads[-1])
    if not differs(ys[0], ys[-1], spreads[0], spreads[-1]):
        return (f"{name}: {points}; m={ms[0]} vs m={ms[-1]}: {INCONCLUSIVE}, the gap "
                f"({fmt(abs(gap))}) is inside their intervals combined (±{fmt(both)}).")
    way = "larger" if gap < 0 else "smaller"
    steps = [differs(a, b, s, t) and (b - a) * gap > 0
             for a, b, s, t in zip(ys, ys[1:], spreads, spreads[1:])]
    between = ("every step between them goes that way beyond the intervals" if all(steps) else
               f"{len(steps) - sum(steps)} of the {len(steps)} steps between them not decided that way")
    return (f"{name}: {points}; {way} at m={ms[0]} than at m={ms[-1]}, beyond the intervals "
            f"(gap {fmt(abs(gap))}, ±{fmt(both)} combined); {between}.")


def _against(name: str, row: dict, expected: float, floor: float, source: str) -> str:
    """`against` with the larger of `floor` and the row's ±; without an interval (one step),
    INCONCLUSIVE: one value decides nothing. Says when the interval reaches below the formula."""
    ci = _spread(row)
    if math.isnan(ci):
        return (f"{name}: {fmt(row['measured'])} measured vs {fmt(expected)} from {source}: {INCONCLUSIVE}, "
                "one timed step gives no interval.")
    said = against(name, row["measured"], expected, tolerance=max(floor, ci), source=source)
    if row["measured"] - ci < row["formula"] <= row["measured"]:
        said += (f" Its interval (±{fmt(ci)}) reaches below {fmt(row['formula'])}, the least idle "
                 f"share equal stages can have: the {len(row.get('bubbles', []))} steps pin the "
                 "mean down only that far.")
    return said


def bubble(rows: list[dict], floor: float = BUBBLE_FLOOR, work: str = "") -> list[str]:
    """Sentences on the bubble table (`runs.bubble_rows`, with its `spread` column)."""
    out, tag = [], _tag(work)
    for p, sched, pts in _groups(rows):
        ms, spreads = [r["m"] for r in pts], [_spread(r) for r in pts]
        if len(pts) > 1:
            out.append(ends(f"{tag}{sched} measured bubble (p={p})", ms, [r["measured"] for r in pts], spreads))
            out.append(ends(f"{tag}{sched} gap to {FORMULA} (measured - formula, p={p})", ms,
                            [r["measured"] - r["formula"] for r in pts], spreads))
        last = pts[-1]
        out.append(_against(f"{tag}{sched} bubble at m={last['m']} (p={p})", last, last["formula"],
                            floor, FORMULA))
    return out


def paired(a: dict, b: dict, key: str = "bubbles") -> tuple[float, float]:
    """(mean of a - b over the interleaved pairs, its 95 % CI); nan CI below two pairs."""
    diffs = [x - y for x, y in zip(a.get(key) or [], b.get(key) or [])]
    return mean_and_ci(diffs) if diffs else (math.nan, math.nan)


def schedules(rows: list[dict], work: str = "", key: str = "bubbles", what: str = "bubble",
              unit: str = "") -> list[str]:
    """1F1B beside GPipe at each m both ran, per p, from the paired differences (the two ran
    interleaved). With equal stages the formula gives both the same bubble; when no m decides,
    the sentence gives the interval reached: a gap smaller than it would go unseen."""
    out = []
    for p in sorted({r["stages"] for r in rows}):
        by = {sched: {r["m"]: r for r in pts} for q, sched, pts in _groups(rows) if q == p}
        ms = sorted(set(by.get("gpipe", {})) & set(by.get("1f1b", {})))
        if not ms:
            continue
        gaps = {m: paired(by["1f1b"][m], by["gpipe"][m], key) for m in ms}
        lower = [f"m={m}" for m, (d, c) in gaps.items() if not math.isnan(c) and d < -c]
        higher = [f"m={m}" for m, (d, c) in gaps.items() if not math.isnan(c) and d > c]
        points = ", ".join(f"{fmt(d, unit)} ± {fmt(c)} at m={m}" for m, (d, c) in gaps.items())
        head = (f"{_tag(work)}1F1B vs GPipe {what}, p={p}, interleaved step by step (1F1B - GPipe, mean "
                f"of the pairs ± paired 95 % CI: {points}")
        if what == "bubble":
            head += f"; {FORMULA} gives both the same"
        cis = [c for _, c in gaps.values() if not math.isnan(c)]
        if lower or higher:
            out.append(f"{head}): {_verdict(lower, higher, gaps)}.")
        elif not cis:
            out.append(f"{head}): {INCONCLUSIVE}, one step per schedule gives no interval.")
        else:
            out.append(f"{head}): no gap beyond the paired intervals at any m ({INCONCLUSIVE}: at each m "
                       f"a gap smaller than its own interval, listed above, would go unseen): consistent "
                       f"with equal {what}s.")
    return out


def _verdict(lower: list, higher: list, gaps: dict) -> str:
    """The decided m values, counted: a difference is CONSISTENT only when every decided m agrees
    and most m are decided; otherwise each m's own 95 % test, one of several, may be a false
    'beyond' (about 1 in 20 each), and the sentence says so."""
    tested = [m for m, (_, c) in gaps.items() if not math.isnan(c)]
    said = "; ".join(x for x in (
        f"1F1B lower beyond the paired interval at {', '.join(lower)}" if lower else "",
        f"1F1B higher beyond the paired interval at {', '.join(higher)}" if higher else "") if x)
    k, n = len(lower) + len(higher), len(tested)
    if not (lower and higher) and 2 * k > n:
        return f"{said} ({k} of {n} m values, all the same way: a consistent difference)"
    signs = ", ".join(f"{'+' if d > 0 else '-' if d < 0 else '0'} at m={m}" for m, (d, c) in gaps.items()
                      if not math.isnan(c) and abs(d) <= c)
    return (f"{said}: decided at {k} of {n} m values only (signs of the others: {signs or 'none'}): no "
            f"consistent difference -- each m is tested at 95 %, so among {n} tests one false "
            "'beyond' is not unlikely")


PREDICTED = {"gpipe": ("m", lambda m, p: m), "1f1b": ("min(m, p)", lambda m, p: min(m, p))}


def in_flight(rows: list[dict], work: str = "") -> list[str]:
    """1F1B's point, from the `max in flight` column (counted from the schedule's events, in the
    median step): micro-batches whose activations a stage held at once. Memory is not measured."""
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
        line = (f"{_tag(work)}Most micro-batches a stage held at once (counted from the schedule's events), "
                f"p={p}: " + "; ".join(text) + ".")
        if len(held) == 2:
            m, g = held["gpipe"][-1]
            f = dict(held["1f1b"]).get(m)
            if f is not None:
                line += (f" At m={m}, 1F1B held {g / f:.2g}x fewer micro-batches' activations at once "
                         "than GPipe (memory itself not measured)." if f < g
                         else f" At m={m}, 1F1B held no fewer than GPipe ({f} vs {g}).")
        out.append(line)
    return out
