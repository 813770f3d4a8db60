"""The course's "±": a 95 % confidence interval of the quantity compared, never the range of steps.

    mean_ci([812, 790, 845, 801])          -> 37.8: their mean (812) is known to about ±38
    rate_ci(per_step_rates, warmup=2)      -> (mean rate, ±) over the steady-state steps
    combined(3.0, 4.0)                     -> 5.0: the ± of a difference of two such means

A measurement repeated n times (steps, chunks, passes, seeds) gives a mean and a Student-t
interval around it (scipy.stats): how far that mean could move if the run were repeated. Half the
min-max range of single steps, which the course printed before, measures how much one step
varies: it grows with every hiccup of a shared machine and never shrinks with more steps. Fewer
than two values give no interval at all (`nan`): nothing can be decided from one value.
`SPREAD_NOTE` is the one sentence a notebook prints where its student first meets "±".
"""
from __future__ import annotations

import math

LEVEL = 0.95
SPREAD_NOTE = ("± is the 95 % confidence interval of the mean over this run's repeated "
               "measurements (steps, pieces, passes or seeds; warm-up left out): how precisely this "
               "run pins its mean down, not how much one step varies. It does not cover what "
               "changes between runs (another program starting on a shared machine), which can be "
               "larger: repeat the run to see that. Two values differ when the gap between them is "
               "larger than their intervals combined as sqrt(a² + b²); otherwise the finding says "
               "\"inconclusive here\".")


def steady(values, warmup: int = 0) -> list[float]:
    """The values after the first `warmup` (None dropped)."""
    return [float(v) for v in list(values)[warmup:] if v is not None]


def mean_ci(values, level: float = LEVEL) -> float:
    """Half-width of the Student-t interval of the mean of `values` (nan below two values)."""
    from scipy import stats
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    n = len(xs)
    if n < 2:
        return math.nan
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return float(stats.t.ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n))


def mean_and_ci(values, warmup: int = 0, level: float = LEVEL) -> tuple[float, float]:
    """(mean, ±) of the steady-state values; (nan, nan) when none are left."""
    xs = steady(values, warmup)
    return (sum(xs) / len(xs) if xs else math.nan), mean_ci(xs, level)


def rate_ci(rates, warmup: int = 0, level: float = LEVEL) -> tuple[float, float]:
    """(mean rate, ±) of per-step or per-chunk rates (img/s, samples/s), warm-up left out."""
    return mean_and_ci(rates, warmup, level)


def combined(*halfwidths) -> float:
    """The ± of a sum or difference of independent means: the half-widths in quadrature."""
    return math.sqrt(sum(float(h) ** 2 for h in halfwidths))


def decided(halfwidth) -> bool:
    """Whether an interval exists (two or more values gave it)."""
    return halfwidth is not None and not math.isnan(float(halfwidth))


def ratio_ci(ratios, level: float = LEVEL) -> tuple[float, float, float]:
    """(geometric mean, low, high) of ratios a/b taken within each round or pass (paired): the
    Student-t interval of the mean of their logarithms, turned back into a ratio (so it is not
    symmetric). The pairing cancels what a round shares (the machine's load at that minute); the
    comparison is decided when the interval leaves out 1. nan bounds below two ratios."""
    logs = [math.log(float(r)) for r in ratios if r is not None and float(r) > 0]
    if not logs:
        return math.nan, math.nan, math.nan
    mid, half = sum(logs) / len(logs), mean_ci(logs, level)
    return math.exp(mid), math.exp(mid - half), math.exp(mid + half)
