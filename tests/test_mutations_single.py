"""Notebook 01's batch-size check, mutation-tested.

1. Every answer in tests/answers/01-batch-size/ is run as the student's cell (with the names the
   notebook defines before it) and judged by the real check: wrong answers (another width, a
   batch size ignored, numbers typed in with jitter, a number that does not follow the steps,
   seconds per step, steps per second, forward only, no optimizer step, best not the fastest, a
   crash, ...) must be called wrong with a message naming the mistake; right answers written
   differently from the course's (a perf_counter loop, torch.utils.benchmark, numpy numbers) must
   be solved. Tiny set-up: width 4, random 16x16 images, two timed steps, one CPU thread.
2. The decision rule itself (`timing.Study`), on simulated measurements far noisier than this
   machine's: a right answer is never refused, a wrong unit is always called wrong, a number that
   does not follow the known sleep is always caught, and close sizes are "too close to call".
"""
from __future__ import annotations

import math
import random

import pytest

from mutants import answers

EXERCISE = "01-batch-size"


@pytest.fixture(scope="module")
def setup():
    import torch

    from dltutor.single import exercise
    threads = torch.get_num_threads()
    torch.set_num_threads(1)       # steadier timings on a shared CPU; restored below
    g = torch.Generator().manual_seed(0)   # what is timed, not what is learnt: random 16x16 images
    x, y = torch.rand(512, 3, 16, 16, generator=g), torch.randint(0, 10, (512,), generator=g)
    yield exercise.Setup(x, y, width=4, steps=2, device=torch.device("cpu"))
    torch.set_num_threads(threads)


def run_answer(answer, setup) -> dict:
    """The answer's cell run with the names notebook 01 defines before it."""
    from dltutor.data import loaders
    from dltutor.single import models, speed
    names = dict(loaders=loaders, models=models, speed=speed, x_train=setup.x, y_train=setup.y,
                 WIDTH=setup.width, SPEED_STEPS=setup.steps, device=setup.device)
    exec(compile(answer.source(), str(answer.path), "exec"), names)
    return names


@pytest.mark.parametrize("answer", answers(EXERCISE), ids=str)
def test_answer_is_judged_as_expected(answer, setup, capsys):
    from dltutor.single import exercise
    names = run_answer(answer, setup)
    capsys.readouterr()
    ok = exercise.check(names["measure"], names["BATCH_SIZES"], names["results"],
                        names["best_batch_size"], setup)
    out = capsys.readouterr().out
    status = {"passed": "solved"}.get(out.split(":", 1)[0], out.split(":", 1)[0])
    assert status == answer.expect, f"{answer.path.name} ({answer.why}) was judged {status}:\n{out}"
    assert ok is (answer.expect == "solved")
    if answer.expect == "wrong":
        answer.assert_named(out)
    else:
        assert "trained the notebook's model on batches of bs images" in out, out


# ------------------------------------------------------------------ the decision rule, simulated
RATES = {16: 500.0, 64: 1000.0, 128: 1100.0}     # img/s, 64 and 128 close


class Simulated:
    """Measurements with multiplicative noise (log-sd `sd`), one call in ten 3x slower (a burst of
    load), and the known sleep added to every step; `student` turns the true rate into what the
    student's measure returns."""

    def __init__(self, seed, student=lambda rate, bs, delay: rate, sd=0.35):
        self.random, self.student_of, self.sd, self.problems = random.Random(seed), student, sd, {}

    def measured(self, bs, delay=0.0) -> float:
        rate = RATES[bs] * math.exp(self.random.gauss(0, self.sd))
        rate /= 3 if self.random.random() < 0.1 else 1
        return bs / (bs / rate + delay)

    def student(self, bs, delay=0.0):
        return self.student_of(self.measured(bs, delay), bs, delay)

    def reference(self, bs):
        return self.measured(bs)


def study(seed, **kw):
    from dltutor.single import timing
    s = timing.Study(list(RATES), Simulated(seed, **kw))
    s.rounds(None)
    s.slowed(16)
    return s


SEEDS = range(150)


def test_a_right_answer_is_never_refused_under_heavy_noise():
    refused = [seed for seed in SEEDS if study(seed).problems()]
    assert not refused, f"right answers refused on seeds {refused}: {study(refused[0]).problems()}"


def test_a_wrong_unit_is_always_called_wrong_under_the_same_noise():
    for seed in SEEDS:
        problems = study(seed, student=lambda rate, bs, delay: rate / bs).problems()
        assert any("steps per second" in p for p in problems), (seed, problems)


def test_a_number_that_ignores_the_sleep_is_always_caught():
    """Trains, but returns what it measured once (with 5 % jitter): the slowed call breaks the bound."""
    for seed in SEEDS:
        jitter = random.Random(seed)
        problems = study(seed, student=lambda rate, bs, delay: RATES[bs] * jitter.uniform(
            0.95, 1.05)).problems()
        assert any("cannot train more than" in p for p in problems), (seed, problems)


def test_close_sizes_are_too_close_to_call_not_ranked():
    from dltutor.single import timing
    said = [study(seed).ranking(128) for seed in range(40)]
    close = sum(timing.TOO_CLOSE in s for s in said)
    assert close >= 30, said[:3]                      # 1100 vs 1000 img/s inside this noise
    assert all("16 is the fastest" not in s for s in said)


# ------------------------------------------------------------------ the wording of the verdicts
def test_the_reference_verdict_speaks_of_the_solutions_results_not_yours(setup, capsys):
    """A check of the course's solution (solution=True) never says "your results"."""
    from dltutor.single import exercise
    measure = lambda bs: exercise.reference(setup, bs)    # noqa: E731 - trains the set-up
    results = {16: 100.0, 64: 300.0, 128: 200.0}
    assert not exercise.check(measure, [16, 64, 128], results, 128, setup, solution=True)
    out = capsys.readouterr().out
    assert "the solution's results have batch size 64 fastest" in out and "your" not in out, out
    assert not exercise.check(measure, [16, 64, 128], results, 128, setup)
    assert "your results have batch size 64 fastest" in capsys.readouterr().out


def test_an_undecided_agreement_is_not_called_too_close_to_call():
    """"too close to call" is the ranking's word; a ratio interval that is neither inside nor
    outside the 2x band says agreement is not shown, and why."""
    from dltutor.single import timing

    class NoProblems:
        problems = {}
    s = timing.Study([16, 64], NoProblems())
    s.pairs = {16: [(100.0, 100.0), (104.0, 100.0)], 64: [(300.0, 100.0), (60.0, 100.0)]}
    s.decided = {16: timing.INSIDE, 64: timing.UNDECIDED}
    text = s.agreement()
    assert timing.TOO_CLOSE not in text, text
    assert "at 64 (" in text and "agreement within 2x not shown (the interval straddles the 2x band)" in text
    assert "at 16 (" in text and text.count("not shown") == 1, text
