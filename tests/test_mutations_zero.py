"""Mutation tests of notebook 04's checks: every answer in tests/answers/04-memory and
tests/answers/04-zero1 is judged as its header says (wrong, with a message naming the mistake, or
solved), on fresh seeds.

04-memory runs in this process: each answer (the notebook cell's code) is executed as the
notebook would, then checked on three seeds. 04-zero1 launches 2 ranks once for every answer
that defines a class Zero1 (tests/zero1_answers_worker.py: each answer through the exercise's own
harness, both models of one fresh seed) and judges each answer's records as the check does;
an answer without a class (a script of its own) goes through the real check.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from dltutor.core.units import GiB
from dltutor.grading import ranks
from dltutor.grading.verdict import SOLVED, WRONG, from_problems
from dltutor.zero import exercise_memory as mem_ex
from dltutor.zero import exercise_zero1 as z1
from dltutor.zero import exercise_zero1_judge as z1_judge
from dltutor.zero import memory
from mutants import answers

WORKER = Path(__file__).resolve().parent / "zero1_answers_worker.py"
EXERCISE_P = 10_000_000_000
_STATUS = {"passed:": SOLVED, "wrong:": WRONG, "not yet:": "not yet"}


def _status(out: str) -> str:
    return next(s for head, s in _STATUS.items() if out.startswith(head))


# ------------------------------------------------------------------ 04-memory, in this process
@pytest.mark.parametrize("answer", answers("04-memory"), ids=str)
def test_memory_answer_is_judged(answer, capsys):
    space = dict(memory=memory, GiB=GiB, EXERCISE_P=EXERCISE_P)
    exec(answer.source(), space)                    # the notebook cell, as the student ran it
    for seed in random.sample(range(10**6), 3):
        capsys.readouterr()
        mem_ex.check(space["model_state_bytes"], space["d_16gb_answer"],
                     space["d_80gb_answer"], EXERCISE_P, seed=seed, **space["EX_ACT"])
        out = capsys.readouterr().out
        assert _status(out) == answer.expect, f"{answer.name} (seed {seed}): {answer.why}\n{out}"
        if answer.expect == WRONG:
            answer.assert_named(out)


# ------------------------------------------------------------------ 04-zero1, on 2 ranks
def _has_class(a) -> bool:
    return "class Zero1" in a.source()


ZERO1 = answers("04-zero1")
BATCHED = [a for a in ZERO1 if _has_class(a)]
SCRIPTS = [a for a in ZERO1 if not _has_class(a)]


@pytest.fixture(scope="module")
def zero1_batch(tmp_path_factory):
    """One launch of 2 ranks for every answer with a class Zero1: (seed, records)."""
    folder = tmp_path_factory.mktemp("zero1_answers")
    for a in BATCHED:
        a.write(folder / f"{a.name}.py")
    seed = random.randrange(1, 10**6)
    ran = ranks.run_on_ranks(WORKER, nproc=z1.NPROC, args=[str(folder)],
                             env={z1.SEED_ENV: str(seed)}, timeout=150, dist_timeout=20)
    assert ran.failure is None, f"seed {seed}: {ran.failure}"
    return seed, ran.metrics


@pytest.mark.slow
@pytest.mark.parametrize("answer", BATCHED, ids=str)
def test_zero1_answer_is_judged(answer, zero1_batch):
    seed, metrics = zero1_batch
    mine = [m for m in metrics if m.get("answer") == answer.name]
    assert mine, f"{answer.name}: no records (seed {seed})"
    verdict = from_problems(z1.EXERCISE, *z1_judge.judge(mine, seed))
    assert verdict.status == answer.expect, f"{answer.name} (seed {seed}): {answer.why}\n" \
                                            f"{verdict.text()}"
    if answer.expect == WRONG:
        answer.assert_named(verdict.message)


@pytest.mark.slow
@pytest.mark.parametrize("answer", SCRIPTS, ids=str)
def test_zero1_script_answer_is_judged(answer, tmp_path, capsys):
    z1.check(answer.write(tmp_path / "zero1_by_hand.py"), timeout=90)
    out = capsys.readouterr().out
    assert _status(out) == answer.expect, f"{answer.name}: {answer.why}\n{out}"
    if answer.expect == WRONG:
        answer.assert_named(out)
