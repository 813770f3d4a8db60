"""Notebook 01's exercise: the fastest batch size, checked by measuring again.

The student writes `measure(batch_size) -> float` (training images/s of a fresh ResNet fed by a
`DeviceLoader` at that batch size, timed with `speed.measure_throughput`), measures at least three
sizes into `results` and names `best_batch_size`. `check(...)` does not trust those numbers:

  * it calls the student's `measure` itself on every size and, right after each call, measures
    the same set-up with the library (`reference`: a fresh model, the same steps and warm-up);
  * the two must be within NOISE = 3x of each other (both ways). Why 3x: the course's smallest
    machine is a shared 2-core CPU where a few timed steps of one set-up, run twice, have differed
    by tens of percent, and by much more while other processes fight for the cores; a number that
    is not a measurement of this set-up (typed in, another model, seconds per step instead of
    images per second) is usually off by far more. A size that disagrees is measured again
    (ATTEMPTS in all: a burst of load passes) before the verdict says so;
  * the student's `results[bs]` was measured earlier, in their own cell, under whatever load the
    machine had then, so it gets a wider band: within RESULTS_NOISE = 10x of the check's numbers.
    Why 10x: in one `make test` run (two test workers and their launches on 2 cores) results[64]
    was 274.8 img/s and the check measured 842 to 967 img/s a minute later, 3.1x to 3.5x apart;
    the numbers typed in that this band is for (1, 2, 3) are hundreds of times off;
  * a measurement never repeats to the last digit: a `measure` that returns the same float twice
    (for one size, or for two sizes, or the value already in `results`) returns a number, it does
    not measure;
  * `best_batch_size` must be the fastest size of the check's own measurement, or tied with it
    within the spreads (`core.findings.differs`; the spread of a size is the widest half range of
    its chunks plus half the range of every measurement of it), which the verdict calls
    inconclusive. `results` itself is not trusted for the ranking.

`check_solution(setup)` runs the course's solution (course/labs/01_cifar10/solutions/batch_size.py,
the code of the notebook's collapsed solution) through the same check.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from dltutor.core import course
from dltutor.core.findings import INCONCLUSIVE, differs, fmt, half_range
from dltutor.grading.verdict import from_problems, not_yet

EXERCISE = "01-batch-size"
NOISE = 3.0              # the student's img/s and the check's may differ by this factor, no more
RESULTS_NOISE = 10.0     # results[bs], measured earlier in the student's cell, against the check's
ATTEMPTS = 3             # measurements of a size that disagrees beyond NOISE, before "wrong"
MIN_SIZES = 3
SOLUTION = "01_cifar10/solutions/batch_size.py"


@dataclass
class Setup:
    """What the notebook measures on: the data on the device, the model's width, steps, device."""
    x: object
    y: object
    width: int
    steps: int
    device: object


def reference(setup: Setup, batch_size: int) -> dict:
    """The library's measurement of the exercise's set-up at `batch_size` (img_per_s, spread)."""
    from dltutor.data.loaders import DeviceLoader
    from dltutor.single import models, speed
    loader = DeviceLoader(setup.x, setup.y, batch_size=batch_size)
    return speed.measure_throughput(models.cifar_resnet(width=setup.width), loader,
                                    steps=setup.steps, device=setup.device)


def _number(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def _unwritten(value) -> bool:
    return value is None or value is Ellipsis


def check(measure, batch_sizes, results, best_batch_size, setup: Setup,
          solution: bool = False) -> bool:
    """Re-run the student's `measure` and the library's on every size; print the verdict."""
    sizes, results = list(batch_sizes or []), dict(results or {})
    if not callable(measure):
        return not_yet(EXERCISE, "define measure(batch_size) above and run its cell",
                       reference=solution).show()
    if not sizes:
        return not_yet(EXERCISE, "BATCH_SIZES is empty", reference=solution).show()
    first = measure(sizes[0])
    if _unwritten(first) or _unwritten(best_batch_size):
        what = ["measure(batch_size) returns nothing yet: return the measured images/s"
                if _unwritten(first) else None,
                "best_batch_size is not set yet" if _unwritten(best_batch_size) else None]
        return not_yet(EXERCISE, *[w for w in what if w], reference=solution).show()
    problems = []
    if len(sizes) < MIN_SIZES:
        problems.append(f"measure at least {MIN_SIZES} batch sizes (BATCH_SIZES has {len(sizes)})")
    if best_batch_size not in sizes:
        problems.append(f"best_batch_size is {best_batch_size!r}, which is not one of "
                        f"BATCH_SIZES {sizes}")
    problems += [f"results has batch size {bs}, which is not in BATCH_SIZES"
                 for bs in results if bs not in sizes]
    theirs, ref, seen = {}, {}, {}
    for bs in sizes:
        theirs[bs], ref[bs] = [], []
        for attempt in range(ATTEMPTS):   # the student's measure, then the library's, right after
            value = first if (bs, attempt) == (sizes[0], 0) else measure(bs)
            theirs[bs].append(value)
            ref[bs].append(reference(setup, bs))
            if _repeated(bs, _number(value), seen, results) or _number(value) is None:
                break
            if not _mismatch(bs, theirs[bs], ref[bs], results):
                break
        problems += _mismatch(bs, theirs[bs], ref[bs], results)
    problems += _repeats(seen, results)
    if problems:
        return from_problems(EXERCISE, problems, "", reference=solution).show()
    return from_problems(EXERCISE, *_ranking(sizes, theirs, results, ref, best_batch_size),
                         reference=solution).show()


def _repeated(bs, value, seen: dict, results: dict) -> bool:
    """A timed measurement never gives the same float twice: note `value` in `seen` (value ->
    the sizes that returned it) and say whether it was seen before (or typed into results)."""
    if value is None:
        return False
    again = value in seen or _number(results.get(bs)) == value
    seen.setdefault(value, []).append(bs)
    return again


def _repeats(seen: dict, results: dict) -> list[str]:
    out = []
    for value, sizes in seen.items():
        typed = [bs for bs in sizes if _number(results.get(bs)) == value]
        if len(sizes) > 1 or typed:
            calls = ", ".join(f"measure({bs})" for bs in dict.fromkeys(sizes))
            also = f"; results holds it for {typed[0]}" if typed else ""
            out.append(f"{calls} returned exactly {value!r} ({len(sizes)} calls{also}): a timed "
                       "measurement never "
                       "repeats to the last digit, so this number does not come from timing the "
                       "training steps")
    return out


def _mismatch(bs, theirs: list, refs: list[dict], results: dict) -> list[str]:
    """The student's numbers for `bs` against the check's, within NOISE x (any of the attempts)."""
    out, lib = [], [r["img_per_s"] for r in refs]
    got = [_number(v) for v in theirs]
    if got[-1] is None:
        return [f"measure({bs}) returned {theirs[-1]!r}, not a positive number of images/s"]
    if not any(1 / NOISE <= g / r <= NOISE for g, r in zip(got, lib)):
        out.append(f"measure({bs}) gave {_several(got)}, the check's own measurement of the same "
                   f"set-up right after it {_several(lib)} (more than {NOISE:g}x apart): time a "
                   "fresh model on a DeviceLoader at that batch size with speed.measure_throughput")
    mine, band = _number(results.get(bs)), got + lib
    if bs in results and (mine is None or
                          not min(band) / RESULTS_NOISE <= mine <= max(band) * RESULTS_NOISE):
        out.append(f"results[{bs}] is {results[bs]!r}, but measure({bs}) and the check measured "
                   f"{fmt(min(band))} to {fmt(max(band), 'img/s')} (more than {RESULTS_NOISE:g}x "
                   f"apart): put what measure({bs}) returns in results, not a number typed in")
    return out


def _several(values) -> str:
    return " / ".join(fmt(v) for v in values) + " img/s"


def _ranking(sizes, theirs, results, ref, best) -> tuple[list[str], str]:
    """(problems, summary): best must be the fastest of the student's (checked) results; the
    check's own ranking is printed beside it, "inconclusive" where the spreads overlap. Two
    measurements minutes apart on a shared CPU may rank close sizes differently, so a
    disagreement with the check's own ranking is reported, not failed."""
    rate = {bs: sum(r["img_per_s"] for r in ref[bs]) / len(ref[bs]) for bs in sizes}
    spread = {bs: max(r["spread"] for r in ref[bs]) + half_range(
        [r["img_per_s"] for r in ref[bs]] + [_number(v) for v in theirs[bs]]
        + [_number(results.get(bs))]) for bs in sizes}
    top = max(sizes, key=rate.get)
    mine = max(sizes, key=lambda bs: _number(results.get(bs)) or 0.0)
    shown = ", ".join(f"{bs}: {fmt(rate[bs])} ± {fmt(spread[bs])}" for bs in sizes)
    table = f"the check's own img/s by batch size: {shown}"
    if best != mine:
        return [f"best_batch_size is {best}, but your results have batch size {mine} fastest "
                f"({fmt(_number(results.get(mine)) or 0.0)} img/s): the best is the size with "
                "the most images/s"], ""
    if best == top:
        rest = [bs for bs in sizes if bs != top]
        near = max(rest, key=rate.get) if rest else None
        tie = (f"; {near} is inside the spreads, so which is fastest is {INCONCLUSIVE}"
               if near is not None and not differs(rate[top], rate[near], spread[top], spread[near])
               else "")
        return [], (f"best_batch_size {best} is the fastest in your results and in the check's "
                    f"own measurement{tie} ({table})")
    if not differs(rate[top], rate[best], spread[top], spread[best]):
        return [], (f"best_batch_size {best} is the fastest in your results; the check measured "
                    f"{top} fastest, but the gap is inside the spreads, so which is fastest is "
                    f"{INCONCLUSIVE} ({table})")
    return [], (f"best_batch_size {best} is the fastest in your results, but the check's own "
                f"measurement puts {top} ahead beyond the spreads ({table}): on a shared machine "
                "a ranking can change between two runs; measure again to see which one holds")


def check_solution(setup: Setup) -> bool:
    """The course's solution (the notebook's collapsed code), run and checked like the student's."""
    from dltutor.data import loaders
    from dltutor.single import models, speed
    names = dict(loaders=loaders, models=models, speed=speed, x_train=setup.x, y_train=setup.y,
                 WIDTH=setup.width, SPEED_STEPS=setup.steps, device=setup.device)
    path = course.lab(SOLUTION)
    exec(compile(path.read_text(), str(path), "exec"), names)
    return check(names["measure"], names["BATCH_SIZES"], names["results"],
                 names["best_batch_size"], setup, solution=True)
