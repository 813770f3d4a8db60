"""Notebook 01's exercise: the fastest batch size, checked by watching and measuring again.

The student writes `measure(batch_size) -> float` (training images/s of a fresh
`models.cifar_resnet(width=WIDTH)` fed by a `DeviceLoader` at that batch size), measures at least
three sizes into `results` and names `best_batch_size`. `check(...)` does not trust the numbers:

  * What was timed. Every call of the student's `measure` runs under `watch.watching`: it must
    train the notebook's model (its parameter count, i.e. WIDTH) on batches of the size asked, on
    the notebook's device, forward, backward and optimizer step. A `measure` that ignores its
    batch size, builds another width, returns numbers without training, or times the forward
    pass only is named for that (`Seen.problem`).
  * The unit. The check alternates the student's `measure(bs)` with its own measurement of the
    same set-up (`reference`, the library's `speed.measure_throughput`), the order flipping every
    round, and decides on t-intervals of the log ratios (`timing`): within BAND = 2x agrees,
    wholly beyond it (seconds per step, steps/s: 16x to 10^5x off) is wrong, anything between is
    measured again and finally "agreement within 2x not shown", never held against the answer.
  * That the number is measured. On the smallest size the check makes every training step sleep
    a known time and calls `measure` once more: steps that long cannot train more than
    bs / sleep img/s, so a number above that bound was not measured on those steps.
  * `results[bs]` (measured earlier, in the student's cell, under whatever load the machine had
    then) within RESULTS_NOISE = 10x of what `measure(bs)` gives now: in one `make test` run
    results[64] was 274.8 img/s and the check measured 842 to 967 img/s a minute later (3.5x).
  * `best_batch_size` is the fastest size of the student's own `results`. The check's own ranking
    (its reference measurements, a t-interval on the difference of log rates) is printed beside
    it, "too close to call" where the interval holds 0; a disagreement beyond the interval is
    reported, not failed (two runs minutes apart on a shared machine may rank sizes differently).

`check_solution(setup)` runs the course's solution (course/labs/01_cifar10/solutions/batch_size.py,
the code of the notebook's collapsed solution) through the same check.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from dltutor.core import course
from dltutor.grading.numbers import as_float, as_int, kind
from dltutor.grading.verdict import from_problems, not_yet, wrong
from dltutor.single import timing
from dltutor.single.timing import fmt
from dltutor.single.watch import Expect, Stopped, watching

EXERCISE = "01-batch-size"
RESULTS_NOISE = 10.0   # results[bs], measured earlier in the student's cell, against measure(bs) now
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


def reference(setup: Setup, batch_size: int) -> float:
    """The library's measurement of the exercise's set-up at `batch_size`, in images/s."""
    from dltutor.data.loaders import DeviceLoader
    from dltutor.single import models, speed
    loader = DeviceLoader(setup.x, setup.y, batch_size=batch_size)
    return speed.measure_throughput(models.cifar_resnet(width=setup.width), loader,
                                    steps=setup.steps, device=setup.device)["img_per_s"]


@functools.lru_cache(maxsize=8)
def model_params(width: int) -> int:
    from dltutor.single import models
    return models.count_parameters(models.cifar_resnet(width=width), trainable_only=False)


def _expect(setup: Setup, batch_size: int) -> Expect:
    import torch
    return Expect(model_params(setup.width), tuple(setup.x.shape[1:]), batch_size,
                  torch.device(setup.device).type)


class Runner:
    """Calls the student's measure (watched) and the check's reference, and remembers the
    first thing each size's calls got wrong (`problems`: batch size -> message)."""

    def __init__(self, measure, setup: Setup):
        self.measure, self.setup, self.problems = measure, setup, {}

    def student(self, bs: int, delay: float = 0.0):
        """The student's img/s at `bs` as a float, or None (and a problem noted)."""
        value, seen, error = None, None, None
        with watching(_expect(self.setup, bs), delay) as seen:
            try:
                value = self.measure(bs)
            except Stopped:
                pass
            except Exception as exc:        # the student's code crashed: that is the verdict
                error = f"{type(exc).__name__}: {_first_line(exc)}"
        self.last = (value, seen, error)
        problem = (f"raised {error}" if error else seen.problem())
        number = as_float(value)
        if problem is None and (number is None or number <= 0):
            problem = f"returned {kind(value)}, not a positive number of images/s"
        if problem:
            self.problems.setdefault(bs, problem)
            return None
        return number

    def reference(self, bs: int) -> float:
        with watching(_expect(self.setup, bs)) as seen:
            rate = reference(self.setup, bs)
        if seen.problem():                  # the check's own measurement must pass its own watch
            raise RuntimeError(f"the check's reference at batch size {bs}: {seen.problem()}")
        return rate


def check(measure, batch_sizes, results, best_batch_size, setup: Setup,
          solution: bool = False) -> bool:
    """Watch and re-run the student's `measure` beside the library's; print the verdict."""
    if not callable(measure):
        return not_yet(EXERCISE, "define measure(batch_size) above and run its cell",
                       reference=solution).show()
    sizes, problems = _sizes(batch_sizes)
    if not sizes and not problems:
        return not_yet(EXERCISE, "BATCH_SIZES is empty", reference=solution).show()
    if problems:
        return wrong(EXERCISE, *problems, reference=solution).show()
    run = Runner(measure, setup)
    first = run.student(sizes[0])
    value, seen, error = run.last
    todo = (_unwritten(value) and not error and not seen.steps) or (
        error or "").startswith("NotImplementedError")
    if todo or _unwritten(best_batch_size):
        what = ["measure(batch_size) returns nothing yet: return the measured images/s"
                if todo else None,
                "best_batch_size is not set yet" if _unwritten(best_batch_size) else None]
        return not_yet(EXERCISE, *[w for w in what if w], reference=solution).show()
    problems = _static(sizes, results, best_batch_size, _whose(solution))
    if problems or run.problems:      # known without timing: no rounds (they take minutes on a CPU)
        for bs in sizes[1:] if run.problems else []:
            run.student(bs)
        return wrong(EXERCISE, *problems, *_grouped(run.problems), reference=solution).show()
    study = timing.Study(sizes, run)
    study.rounds(first)
    if not run.problems:
        study.slowed(min(sizes))     # the cheapest steps to slow down
    problems = _grouped(run.problems) + study.problems()
    problems += _results(sizes, results, study) if not run.problems else []
    if problems:
        return from_problems(EXERCISE, problems, "", reference=solution).show()
    return from_problems(EXERCISE, [], _summary(best_batch_size, study, _whose(solution)),
                         reference=solution).show()


def _first_line(exc: Exception) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:160] if lines else ""


def _unwritten(value) -> bool:
    return value is None or value is Ellipsis


def _sizes(batch_sizes) -> tuple[list[int], list[str]]:
    sizes, problems = [], []
    for v in (list(batch_sizes) if batch_sizes is not None else []):
        n = as_int(v)
        if n is None or n < 1:
            problems.append(f"BATCH_SIZES holds {kind(v)}: a batch size is a whole number of "
                            "images, 1 or more")
        elif n not in sizes:
            sizes.append(n)
    return sizes, problems


def _whose(solution: bool) -> str:
    """Whose results a verdict speaks of: the course's solution's, or the student's."""
    return "the solution's" if solution else "your"


def _static(sizes, results, best, whose: str = "your") -> list[str]:
    """What is wrong without measuring: too few sizes, results' keys and values, best's type."""
    out = []
    if len(sizes) < MIN_SIZES:
        out.append(f"measure at least {MIN_SIZES} batch sizes (BATCH_SIZES has {len(sizes)})")
    if not isinstance(results, dict):
        return out + [f"results is {kind(results)}: make it a dict, batch size -> images/s"]
    keys = {as_int(k): k for k in results}
    out += [f"results has the key {kind(k)}, which is not one of BATCH_SIZES {sizes}"
            for n, k in keys.items() if n not in sizes]
    out += [f"results has no entry for batch size {bs}: measure every size of BATCH_SIZES"
            for bs in sizes if bs not in keys]
    out += [f"results[{n}] is {kind(results[k])}, not a number of images/s"
            for n, k in keys.items() if n in sizes and as_float(results[k]) is None]
    b = as_int(best)
    if b is None:
        out.append(f"best_batch_size is {kind(best)}: it should be a batch size (a whole number)"
                   f" from BATCH_SIZES {sizes}")
    elif b not in sizes:
        out.append(f"best_batch_size is {b}, which is not one of BATCH_SIZES {sizes}")
    elif not out:
        rates = {as_int(k): as_float(v) for k, v in results.items()}
        top = max(rates.values())
        if rates[b] < top:
            fastest = [bs for bs, r in rates.items() if r == top][0]
            out.append(f"best_batch_size is {b}, but {whose} results have batch size {fastest} "
                       f"fastest ({fmt(top)} img/s against {fmt(rates[b])}): the best is the "
                       "size with the most images/s")
    return out


def _grouped(problems: dict) -> list[str]:
    """One line per distinct problem, naming every size it happened at."""
    by_text = {}
    for bs, text in problems.items():
        by_text.setdefault(text, []).append(bs)
    return [", ".join(f"measure({bs})" for bs in sizes) + f" {text}"
            for text, sizes in by_text.items()]


def _results(sizes, results, study) -> list[str]:
    out = []
    for key, value in results.items():
        bs, mine, got = as_int(key), as_float(value), study.student_values(as_int(key))
        if mine is None or not got:
            continue
        if not min(got) / RESULTS_NOISE <= mine <= max(got) * RESULTS_NOISE:
            out.append(f"results[{bs}] is {value!r}, but measure({bs}) gave {fmt(min(got))} to "
                       f"{fmt(max(got), 'img/s')} when the check called it (more than "
                       f"{RESULTS_NOISE:g}x apart): put in results what measure({bs}) returns")
    return out


def _summary(best, study, whose: str = "your") -> str:
    return (f"measure(bs) trained the notebook's model on batches of bs images at every size; "
            f"{study.agreement()}; {study.followed()}; best_batch_size {as_int(best)} is the "
            f"fastest in {whose} results; {study.ranking(as_int(best))}")


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
