"""Paired comparisons over a sweep's passes, and how disturbed those passes were.

Every pass of a lab-05 sweep times all algorithms (or forms) at every size, in a rotated order
(`sweep.over_passes`), so pass p of A and pass p of B met the same minutes of the machine. A
comparison therefore pairs them: the ratio A/B in each pass, and the 95 % confidence interval of
the mean log ratio (Student t, `dltutor.core.spread`) turned back into a ratio: the geometric-mean
ratio and its interval. A slow minute that hits both cancels in the ratio; a heavy tail in the
times is tamed by the log; a ratio is never negative. A verdict needs the interval to exclude 1.

- `ratio(times_a, times_b)`: `Ratio` (geo, lo, hi, wins: passes where A was faster, n).
- `ratio_text(name_a, name_b, r)`: the sentence, decided or "inconclusive here" and why (`why`:
  the gap against the interval as a factor x/÷, and how many passes might decide it).
- `pass_load(rows)`: per pass, the median over rows of (time / that row's fastest pass).
- `disturbance_line(rows, what, load)`: which passes were disturbed (median > `DISTURBED` x fastest),
  whether even the fastest pass was (`fastest_inversions`: a larger size's fastest pass far below a
  smaller size's), and the load average around the launch.
- `rank_test(xs, ys)`: two unpaired sets (exact Mann-Whitney): p-value, for fits from separate sweeps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dltutor.core import spread
from dltutor.core.findings import INCONCLUSIVE

DISTURBED = 1.5   # a pass whose median time is above 1.5x the fastest pass of each row was disturbed


@dataclass
class Ratio:
    geo: float    # geometric mean of the per-pass ratios A/B
    lo: float     # 95 % CI of that geometric mean (nan with fewer than 2 pairs)
    hi: float
    wins: int     # passes in which A was faster than B
    n: int        # pairs

    @property
    def decided(self) -> bool:
        return spread.decided(self.hi - self.lo) and (self.hi < 1 or self.lo > 1)

    def excludes(self, value: float) -> bool:
        """Whether `value` lies outside the interval (False without one)."""
        return spread.decided(self.hi - self.lo) and not self.lo <= value <= self.hi


def ratio(times_a, times_b) -> Ratio:
    """Per-pass ratios a/b of two equally long pass lists (same pass index = same minutes)."""
    pairs = [(a, b) for a, b in zip(times_a, times_b) if a and b and a > 0 and b > 0]
    geo, lo, hi = spread.ratio_ci([a / b for a, b in pairs])   # on the logs: not symmetric
    return Ratio(geo, lo, hi, sum(a < b for a, b in pairs), len(pairs))


def ratio_text(name_a: str, name_b: str, r: Ratio, reason: bool = True) -> str:
    """'a is 0.41x b (95 % CI 0.30-0.55x, 5 paired passes; a faster in 5 of 5)' or inconclusive."""
    if r.n == 0:
        return f"{name_a} vs {name_b}: no pass timed both ({INCONCLUSIVE})"
    won = f"{name_a} faster in {r.wins} of {r.n}"
    if r.n < 2:
        return f"{name_a} / {name_b} = {r.geo:.2f}x in the one pass: {INCONCLUSIVE}, one pass gives no interval"
    body = f"(95 % CI {r.lo:.2f}-{r.hi:.2f}x over {r.n} paired passes; {won})"
    if r.decided:
        return f"{name_a} is {r.geo:.2f}x {name_b} {body}"
    return f"{name_a} / {name_b} = {r.geo:.2f}x {body}: {INCONCLUSIVE}, the interval includes 1x{why(r) if reason else ''}"


def passes_needed(r: Ratio) -> float:
    """About how many paired passes would bring the interval's half-width (in log) below the
    measured gap, at the pass-to-pass spread seen (the half-width shrinks as 1/sqrt(passes))."""
    gap, half = abs(math.log(r.geo)), (math.log(r.hi) - math.log(r.lo)) / 2
    return math.inf if gap == 0 else r.n * (half / gap) ** 2


def why(r: Ratio) -> str:
    """Why a paired ratio is undecided, from its numbers: the gap against the interval, both as
    factors (a ratio's interval is multiplicative: x/÷ f, never ± f %)."""
    if r.n < 2 or not spread.decided(r.hi - r.lo):
        return ""
    need, gap, f = passes_needed(r), abs(r.geo - 1), (r.hi / r.lo) ** 0.5
    head = f" (a {gap:.1%} gap, against a 95 % interval of x/÷ {f:.2g} around the geometric mean: "
    if need > 1000:
        return head + "more than 1000 paired passes at this spread would be needed to tell them apart)"
    return (head + f"about {math.ceil(need)} paired passes at this spread might decide it, if the gap "
            f"measured here is the true one; it may be smaller, as a gap picked for looking large "
            f"often is)")


def pass_load(rows: list[dict]) -> list[float]:
    """Per pass: the median over `rows` (each with `times_s`) of time / that row's fastest pass."""
    rows = [r for r in rows if len(r.get("times_s") or []) > 0]
    passes = min((len(r["times_s"]) for r in rows), default=0)
    out = []
    for p in range(passes):
        xs = sorted(r["times_s"][p] / min(r["times_s"]) for r in rows)
        out.append(xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)
    return out


def fastest_inversions(rows: list[dict], factor: float = DISTURBED) -> list[tuple]:
    """(algorithm, smaller D, its fastest s, larger D, its fastest s) where a larger size's fastest
    pass beat a smaller size's by more than `factor`: the smaller size had no undisturbed pass."""
    out = []
    for alg in sorted({r.get("algorithm") for r in rows if "bytes" in r}):
        pts = sorted((r["bytes"], min(r.get("times_s") or [r["time_s"]])) for r in rows
                     if r.get("algorithm") == alg and "bytes" in r)
        for i, (d, t) in enumerate(pts):
            later = [(d2, t2) for d2, t2 in pts[i + 1:] if t2 * factor < t]
            if later:
                d2, t2 = min(later, key=lambda x: x[1])
                out.append((alg, d, t, d2, t2))
    return out


def _inversion_text(inv: list[tuple]) -> str:
    from dltutor.core.units import fmt_bytes
    alg, d, t, d2, t2 = max(inv, key=lambda x: x[2] / x[4])
    return (f"even the fastest pass is disturbed here: {alg} at {fmt_bytes(d)} took {t * 1e6:.4g} us in its "
            f"fastest pass, {t / t2:.3g}x its fastest at the larger {fmt_bytes(d2)} ({t2 * 1e6:.4g} us), "
            f"which no undisturbed pass would give ({len(inv)} such row{'s' if len(inv) > 1 else ''})")


def _load_text(load: dict | None) -> str:
    """'load average 15.2 -> 19.8 on 2 cores, 4 ranks' from `sweep.run_lab`'s record, or ''."""
    if not load:
        return ""
    ranks = f", {load['ranks']} ranks" if load.get("ranks") else ""
    return (f"; load average {load['before']:.3g} before and {load['after']:.3g} after the launch on "
            f"{load['cores']} core(s){ranks}")


def disturbance_line(rows: list[dict], what: str, load: dict | None = None) -> str:
    """How far each pass sat above the fastest passes, which were disturbed, whether even the fastest
    pass was (`fastest_inversions`), and the machine's load around the launch where it was recorded."""
    pass_ratios = pass_load(rows)
    if not pass_ratios:
        return f"{what}: no passes to judge"
    bad = [i + 1 for i, x in enumerate(pass_ratios) if x > DISTURBED]
    worst = max(r["time_range_s"][1] / r["time_range_s"][0] for r in rows if r.get("time_range_s"))
    each = ", ".join(f"{x:.2g}x" for x in pass_ratios)
    head = (f"{what}: per pass, the median time over all rows was {each} the fastest pass of the "
            f"same row; the slowest pass of a row was up to {worst:.3g}x its fastest{_load_text(load)}")
    inv = fastest_inversions(rows)
    if inv:
        return (f"{head}. {_inversion_text(inv)}. So every pass of those rows was disturbed; a paired "
                f"ratio cancels only load that hits both set-ups alike, and contention slows our Python "
                f"isend/irecv algorithms more than gloo's C++, so the ratios describe this loaded machine "
                f"only: rerun on an idle node")
    if bad:
        return (f"{head}. Pass{'es' if len(bad) > 1 else ''} {', '.join(map(str, bad))} of {len(pass_ratios)} "
                f"{'were' if len(bad) > 1 else 'was'} disturbed (median above {DISTURBED}x the fastest): "
                f"the fastest pass is clean only if some pass escaped the load, and a paired ratio "
                f"cancels only load that hits both set-ups alike")
    return (f"{head}: no pass sat above {DISTURBED}x the fastest (a test relative to the fastest pass: "
            f"load present in every pass does not show in it)")


def rank_test(xs, ys) -> float:
    """Two-sided exact Mann-Whitney p-value that xs and ys come from one distribution (nan if
    either has fewer than 2 values)."""
    from scipy.stats import mannwhitneyu
    xs, ys = [x for x in xs if x == x], [y for y in ys if y == y]
    if len(xs) < 2 or len(ys) < 2:
        return math.nan
    return float(mannwhitneyu(xs, ys, alternative="two-sided", method="exact").pvalue)
