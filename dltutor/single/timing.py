"""The timing half of notebook 01's check: the student's measure against the check's, in rounds.

    study = Study([16, 64, 128], runner)   # runner.student(bs, delay) / runner.reference(bs)
    study.rounds(first)                    # alternated pairs until each size is decided
    study.slowed(16)                       # one call with a known sleep in every training step
    study.problems()                       # the sizes whose numbers are not images/s of the set-up

Agreement. Each pair is (student's img/s, check's img/s), taken one right after the other, the
order flipping every round (student first, then check first), so a drift of the machine's load
cancels; noise on a busy machine is multiplicative, so each pair gives log(student / check). The
spread is pooled over all sizes (their deviations from their own size's mean): two rounds of
three sizes already give 3 degrees of freedom. A size agrees when the 95 % t-interval (scipy.stats)
of its mean lies inside ±log(BAND); it is wrong only when the 99.9 % interval lies wholly outside
(a right answer refused costs more than one more round); otherwise, if the mean ratio itself is
outside the band, the study measures again (up to MAX_ROUNDS), and then leaves the size UNDECIDED
(agreement within 2x not shown), which is not held against the answer; so is a mean inside the band
whose interval is still wide (no sign of a wrong unit: more rounds would only cost the student's
time). TOO_CLOSE ("too close to call") is kept for the ranking of the sizes. BAND =
2x: both time the same steps of the same model, so they differ only by what each puts inside its
timed window (the loader, a synchronisation): tens of percent. A wrong unit is 16x to 10^5x off.
Under eight test sessions' load on 2 cores the pooled sd of the log ratios was 0.05 to 0.7;
a few pairs can look steadier than the machine is, so the sd used is at least SD_FLOOR = 0.25. A
simulation with heavy noise (log-sd 0.35 per measurement, one call in ten 3x slower) refused none
of 1000 right answers and called every one of 1000 steps/s answers wrong; with log-sd 0.5 and one
call in five 3x slower, none refused and 999 of 1000 called wrong (tests/test_mutations_single.py
runs the first on 150 seeds).

Measured, not typed. Then the check makes every training step of the smallest size sleep
`delay` = (SLOWDOWN - 1) step times and calls the student's measure once more: no measurement of
steps that each take more than `delay` can exceed bs / delay img/s, whatever the load; SLACK allows
a window that counts one step more than it timed. A number above that bound was not measured on
those steps. This is a bound, not a noisy sample: a right answer cannot break it.
"""
from __future__ import annotations

import math

from dltutor.core.findings import fmt as _fmt

BAND = 2.0            # a measurement of the same steps, alternated with the check's: within 2x
MIN_ROUNDS, MAX_ROUNDS = 2, 8
LEVEL, LEVEL_WRONG = 0.95, 0.999   # the interval that accepts, the one that refuses
SD_FLOOR = 0.25       # the least log-sd of a ratio assumed: a few pairs can look steadier by chance
SLOWDOWN = 6.0        # the slowed call sleeps (SLOWDOWN - 1) step times in every step
SLACK = 1.5           # a slowed measurement may exceed bs / delay by this much (off-by-one window)
TOO_CLOSE = "too close to call"     # a ranking whose interval holds 0, nothing else
UNDECIDED = "agreement within 2x not shown"   # a ratio interval not inside the band
INSIDE, OUTSIDE = "inside", "outside"
# what a number off by a whole unit usually is: (name, its value from img/s r at batch size bs)
UNITS = (("seconds per step", lambda r, bs: bs / r), ("steps per second", lambda r, bs: r / bs),
         ("seconds per image", lambda r, bs: 1 / r), ("images per minute", lambda r, bs: 60 * r),
         ("images per millisecond", lambda r, bs: r / 1000),
         ("milliseconds per step", lambda r, bs: 1000 * bs / r))


def fmt(value: float, unit: str = "") -> str:
    """An img/s as printed: whole numbers from 100 up (no '1e+03'), 3 significant digits below."""
    text = f"{value:,.0f}" if abs(value) >= 99.5 else _fmt(value)
    return f"{text} {unit}".rstrip()


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def pooled(groups) -> tuple[float, int]:
    """(standard deviation, degrees of freedom) of the values' deviations from their group's mean."""
    groups = [list(g) for g in groups if len(g) > 1]
    df = sum(len(g) - 1 for g in groups)
    if not df:
        return math.inf, 0
    return math.sqrt(sum((v - mean(g)) ** 2 for g in groups for v in g) / df), df


def interval(m: float, sd: float, df: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The Student-t interval of a mean of n values around m; the whole line with no df yet."""
    if not df or not math.isfinite(sd):
        return -math.inf, math.inf
    from scipy import stats
    h = float(stats.t.ppf((1 + level) / 2, df)) * sd / math.sqrt(n)
    return m - h, m + h


class Study:
    def __init__(self, sizes, runner):
        self.sizes, self.run = list(sizes), runner
        self.pairs = {bs: [] for bs in self.sizes}       # (student img/s, check's img/s)
        self.decided = {}                                # bs -> INSIDE / OUTSIDE / UNDECIDED
        self.slow = None                                 # (bs, delay, student's img/s)

    # -------------------------------------------------------------- rounds of alternated pairs
    def logs(self, bs) -> list[float]:
        return [math.log(s / r) for s, r in self.pairs[bs]]

    def spread(self) -> tuple[float, int]:
        sd, df = pooled(self.logs(bs) for bs in self.sizes if bs not in self.run.problems)
        return max(sd, SD_FLOOR), df

    def ci(self, bs, level: float = LEVEL) -> tuple[float, float]:
        sd, df = self.spread()
        x = self.logs(bs)
        return interval(mean(x), sd, df, len(x), level)

    def side(self, bs) -> str | None:
        """INSIDE the band by the 95 % interval, OUTSIDE it by the 99.9 % one, or None."""
        limit = math.log(BAND)
        lo, hi = self.ci(bs)
        if -limit < lo and hi < limit:
            return INSIDE
        lo, hi = self.ci(bs, LEVEL_WRONG)
        return OUTSIDE if hi < -limit or lo > limit else None

    def rounds(self, first) -> None:
        for k in range(MAX_ROUNDS):
            for bs in self.open():
                given = first if (k, bs) == (0, self.sizes[0]) else None
                pair = self.pair(bs, student_first=k % 2 == 0, given=given)
                if pair:
                    self.pairs[bs].append(pair)
            if k + 1 >= MIN_ROUNDS:
                for bs in self.open():
                    verdict = self.side(bs)
                    if verdict is None and (k + 1 == MAX_ROUNDS or self.consistent(bs)):
                        verdict = UNDECIDED
                    if verdict:
                        self.decided[bs] = verdict

    def consistent(self, bs) -> bool:
        """No sign of a wrong unit: the mean ratio is inside the band (only its interval is not).
        More rounds would only narrow a right answer's interval; they are for suspicious sizes."""
        return abs(mean(self.logs(bs))) < math.log(BAND)

    def open(self) -> list[int]:
        return [bs for bs in self.sizes if bs not in self.decided and bs not in self.run.problems]

    def pair(self, bs, student_first: bool, given=None):
        if student_first:
            s = given if given is not None else self.run.student(bs)
            r = self.run.reference(bs) if s is not None else None
        else:
            r = self.run.reference(bs)
            s = self.run.student(bs)
        return (s, r) if s is not None and r is not None else None

    # -------------------------------------------------------------- the slowed call
    def slowed(self, bs) -> None:
        """One more call of the student's measure with a sleep of `delay` in every step."""
        if self.decided.get(bs) == OUTSIDE or not self.pairs[bs]:
            return
        step = bs / math.exp(mean(math.log(r) for _, r in self.pairs[bs]))
        delay = (SLOWDOWN - 1) * step
        value = self.run.student(bs, delay)
        if value is not None:
            self.slow = (bs, delay, value)

    def moved(self) -> bool:
        bs, delay, value = self.slow
        return value <= SLACK * bs / delay

    # -------------------------------------------------------------- what the verdict says
    def student_values(self, bs) -> list[float]:
        return [s for s, _ in self.pairs.get(bs, [])]

    def problems(self) -> list[str]:
        out = [self.unit_problem(bs) for bs in self.sizes if self.decided.get(bs) == OUTSIDE]
        if self.slow and not self.moved():
            bs, delay, value = self.slow
            out.append(f"measure({bs}) gave {fmt(value, 'img/s')} while the check made every "
                       f"training step sleep {delay * 1000:.3g} ms: steps that long cannot train "
                       f"more than {fmt(bs / delay, 'img/s')}, so the number measure returns does "
                       "not come from timing the steps it trains (a wall clock such as "
                       "time.perf_counter sees the sleep; time.process_time does not)")
        return out

    def unit_problem(self, bs) -> str:
        got, ref = self.student_values(bs), [r for _, r in self.pairs[bs]]
        lo, hi = self.ci(bs, LEVEL_WRONG)
        off = {name: abs(mean(math.log(s / unit(r, bs)) for s, r in self.pairs[bs]))
               for name, unit in UNITS}                 # how far from each usual wrong unit
        looks = [name for name in sorted(off, key=off.get) if off[name] < 2 * math.log(BAND)][:1]
        return (f"measure({bs}) gave {self.values(got)}, the check's own measurement of the same "
                f"set-up, taken alternately with it, {self.values(ref, 'img/s')}: yours is "
                f"{math.exp(mean(self.logs(bs))):.3g}x it (99.9 % interval {math.exp(lo):.3g}x to "
                f"{math.exp(hi):.3g}x), beyond the {BAND:g}x that timing noise allows"
                + (f"; it looks like {looks[0]}" if looks else "") + ": return images per second")

    @staticmethod
    def values(values, unit: str = "") -> str:
        return " / ".join(fmt(v) for v in values) + (f" {unit}" if unit else "")

    def agreement(self) -> str:
        parts = []
        for bs in self.sizes:
            lo, hi = self.ci(bs)
            word = "" if self.decided.get(bs) == INSIDE else f", {self.undecided(lo, hi)}"
            parts.append(f"{math.exp(mean(self.logs(bs))):.2f}x at {bs} "
                         f"({math.exp(lo):.2f}-{math.exp(hi):.2f}{word})")
        return ("its img/s against the check's own, measured alternately (95 % intervals, "
                f"within {BAND:g}x expected): " + ", ".join(parts))

    @staticmethod
    def undecided(lo: float, hi: float) -> str:
        """Why a size's 95 % interval (of the log ratio, lo..hi) neither agrees nor refuses."""
        limit = math.log(BAND)
        if lo < -limit < hi or lo < limit < hi:
            return f"{UNDECIDED} (the interval straddles the {BAND:g}x band)"
        return (f"{UNDECIDED} (outside the {BAND:g}x band by this 95 % interval, but not by the "
                "99.9 % one a wrong verdict needs)")

    def followed(self) -> str:
        if not self.slow:
            return "the slowed-down call was not run"
        bs, delay, value = self.slow
        return (f"with a {delay * 1000:.3g} ms sleep in every step, measure({bs}) gave "
                f"{fmt(value)} img/s (at most {fmt(bs / delay)} possible)")

    def ranking(self, best: int) -> str:
        """The check's own ranking from its reference rates, with TOO_CLOSE where it is."""
        logs = {bs: [math.log(r) for _, r in self.pairs[bs]] for bs in self.sizes}
        sd, df = pooled(logs.values())
        m = {bs: mean(v) for bs, v in logs.items()}
        head = "the check's own img/s by batch size: " + ", ".join(
            f"{bs}: {fmt(math.exp(m[bs]))}" for bs in self.sizes)
        top = max(self.sizes, key=m.get)
        other = best if best != top else max((bs for bs in self.sizes if bs != top),
                                             key=m.get, default=None)
        if other is None:
            return head
        n = 1 / (1 / len(logs[top]) + 1 / len(logs[other]))     # the difference's effective n
        close = interval(m[top] - m[other], sd, df, n)[0] <= 0
        if best == top:
            return head + (f"; {best} against {other}: {TOO_CLOSE}" if close else
                           f"; {best} is the fastest beyond the 95 % interval")
        if close:
            return head + f"; the check measured {top} fastest, but against {best} it is {TOO_CLOSE}"
        return head + (f"; the check's own measurement puts {top} ahead of {best} beyond its 95 % "
                       "interval: on a shared machine a ranking can change between two runs; "
                       "measure again to see which one holds")
