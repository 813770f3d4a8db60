"""Findings: the sentences that say what *this* run showed, built from its numbers.

A notebook's prose says what to look for; what was seen is printed by code, from the run's own
numbers, and says "inconclusive here" when a difference is inside the run's spread. Each topic has
a small `findings` (or `describe`) function that turns its rows into sentences with these helpers:

    compare("Horovod", 51.2, "DDP", 60.3, unit="img/s", spread_a=4.0, spread_b=3.1)
      -> 'Horovod 51.2 img/s vs DDP 60.3 img/s: Horovod is 0.85x DDP (the gap, 9.1 img/s, is larger than their 95 % intervals, ±4 and ±3.1, combined: ±5.06).'
    trend("measured bubble", [1, 2, 4], [0.61, 0.45, 0.30], x_name="m")
      -> 'measured bubble falls as m grows: 0.61 at m=1, 0.45 at m=2, 0.3 at m=4.'
    against("bubble at m=4", 0.34, 0.27, tolerance=0.02, source="the formula (p-1)/(m+p-1)")
      -> 'bubble at m=4: 0.34 measured vs 0.27 from the formula (p-1)/(m+p-1): above it by 0.07.'
    show(lines)   # renders as a bullet list in Jupyter, as text under print()

A spread is the half-width of a 95 % confidence interval (`dltutor.core.spread`: of a mean over
repeats, or of an accuracy on a test set); two values differ when the gap between them is larger
than their half-widths combined as sqrt(a² + b²) (the ± of a difference of two independent means). A value without an interval (nan: one measurement)
decides nothing.
"""
from __future__ import annotations

import math

INCONCLUSIVE = "inconclusive here"
RUN_NOTE = "printed from this run's numbers"


def fmt(x: float, unit: str = "") -> str:
    """3 significant digits (thousands as whole numbers) and the unit; 'n/a' for nan."""
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    s = f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"
    return f"{s} {unit}".rstrip() if unit and unit != "%" else s + unit


def half_range(values) -> float:
    """Half the min-max range of repeated measurements (None values ignored; 0 below two values)."""
    values = [v for v in values if v is not None]
    return (max(values) - min(values)) / 2 if len(values) > 1 else 0.0


def accuracy_halfwidth(acc: float, n: int) -> float:
    """95 % half-width of an accuracy measured on `n` examples (binomial): 1.96·sqrt(p(1-p)/n)."""
    return 1.96 * math.sqrt(max(acc * (1 - acc), 0.0) / max(n, 1))


def differs(a: float, b: float, spread_a: float = 0.0, spread_b: float = 0.0) -> bool:
    """True when |a - b| is larger than the two half-widths combined (in quadrature: the ± of the
    difference of two independent means); never when either has no interval (nan)."""
    if any(isinstance(v, float) and math.isnan(v) for v in (a, b, spread_a, spread_b)):
        return False
    return abs(a - b) > math.hypot(spread_a, spread_b)


def compare(name_a: str, a: float, name_b: str, b: float, *, unit: str = "",
            spread_a: float = 0.0, spread_b: float = 0.0) -> str:
    """One sentence: both values, the ratio a/b, or INCONCLUSIVE when the spreads cover the gap."""
    head = f"{name_a} {fmt(a, unit)} vs {name_b} {fmt(b, unit)}"
    spread = f"±{fmt(spread_a)} and ±{fmt(spread_b)}"
    if not differs(a, b, spread_a, spread_b):
        if math.isnan(spread_a) or math.isnan(spread_b):
            return f"{head}: {INCONCLUSIVE}, one measurement gives no interval to decide with."
        return (f"{head}: {INCONCLUSIVE}, the gap ({fmt(abs(a - b), unit)}) is inside their 95 % "
                f"intervals ({spread}, ±{fmt(math.hypot(spread_a, spread_b))} combined).")
    ratio = f"{name_a} is {a / b:.2f}x {name_b}" if b else f"{name_a} is above {name_b}"
    cover = (f" (the gap, {fmt(abs(a - b), unit)}, is larger than their 95 % intervals, {spread}, "
             f"combined: ±{fmt(math.hypot(spread_a, spread_b))})" if spread_a or spread_b else "")
    return f"{head}: {ratio}{cover}."


def direction(ys, spreads=None) -> str:
    """'falls', 'rises', 'flat' (every step inside the spreads, and the first and last points
    too) or 'not monotone'. Small steps that add up count: first and last apart -> rises/falls."""
    spreads = list(spreads) if spreads is not None else [0.0] * len(ys)
    steps = [(0 if not differs(y0, y1, s0, s1) else (1 if y1 > y0 else -1))
             for y0, y1, s0, s1 in zip(ys, ys[1:], spreads, spreads[1:])]
    if all(s == 0 for s in steps):
        if len(ys) > 2 and differs(ys[0], ys[-1], spreads[0], spreads[-1]):
            return "rises" if ys[-1] > ys[0] else "falls"
        return "flat"
    if all(s <= 0 for s in steps):
        return "falls"
    if all(s >= 0 for s in steps):
        return "rises"
    return "not monotone"


def trend(name: str, xs, ys, *, x_name: str, unit: str = "", spreads=None) -> str:
    """One sentence: how `name` moves as `x_name` grows, with every point."""
    way = direction(ys, spreads)
    points = ", ".join(f"{fmt(y, unit)} at {x_name}={x}" for x, y in zip(xs, ys))
    if spreads is not None and any(isinstance(s, float) and math.isnan(s) for s in spreads):
        return (f"{name} as {x_name} grows: {points} ({INCONCLUSIVE}: a point measured once has "
                "no interval to decide with).")
    if way == "flat":
        return (f"{name}: this run cannot tell whether it changes as {x_name} grows (every step inside "
                f"the run's spread: {INCONCLUSIVE}): {points}.")
    if way == "not monotone":
        return f"{name} goes up and down as {x_name} grows: {points}."
    return f"{name} {way} as {x_name} grows: {points}."


def against(name: str, measured: float, expected: float, *, tolerance: float, source: str,
            unit: str = "") -> str:
    """One sentence: a measured value beside a predicted one (formula, reference), within or not.
    Agreement within a tolerance as large as the predicted value decides nothing (zero would
    "agree" too): INCONCLUSIVE then."""
    gap = measured - expected
    head = f"{name}: {fmt(measured, unit)} measured vs {fmt(expected, unit)} from {source}"
    if abs(gap) <= tolerance and expected and abs(tolerance) >= abs(expected):
        return (f"{head}: {INCONCLUSIVE}, the tolerance (±{fmt(tolerance, unit)}) is as large as the "
                f"predicted value, so any measurement from 0 to twice it would count as agreeing.")
    if abs(gap) <= tolerance:
        return f"{head}: within ±{fmt(tolerance, unit)}, they agree."
    return f"{head}: {'above' if gap > 0 else 'below'} it by {fmt(abs(gap), unit)}."


class Findings(list):
    """Sentences that render as a bullet list in Jupyter and as lines of text in a terminal."""

    def __init__(self, lines, title: str = "What this run shows", note: str = RUN_NOTE):
        super().__init__(lines)
        self.title, self.note = title, note

    def __str__(self) -> str:
        return "\n".join([self.title + ":"] + [f"- {s}" for s in self])

    def _repr_markdown_(self) -> str:
        note = f" ({self.note})" if self.note else ""
        return f"**{self.title.strip()}**{note}\n\n" + "\n".join(f"- {s}" for s in self)

    def __repr__(self) -> str:
        return str(self)


def show(lines, title: str = "What this run shows", note: str = RUN_NOTE) -> Findings:
    """The last expression of a cell: `findings.show(topic.findings(rows))`. `note` says where the
    sentences come from (default: this run's numbers; e.g. "computed on paper, nothing ran")."""
    return Findings(lines, title, note)
