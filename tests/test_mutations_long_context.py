"""Mutation tests of notebook 09's two exercise checks: every answer in tests/answers/09-*/ judged
by the real check, each wrong one rejected with its mistake named, each right one (written unlike
the course's solution) solved.

All the answers of an exercise are judged in ONE launch of its ranks (notebook 06's batch runner,
`exercise_batch`, through tests/long_context_batch.py: each answer in a process group of its own,
through the exercise's own `attempt` and `judge`); a right answer is judged on two seeds.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from dltutor.grading import ranks
from dltutor.model_parallel import exercise_batch
from long_context_batch import CHECKS
from mutants import answers

SEEDS = (3, 4, 5, 7, 9, 11, 12, 19, 24)
WORKER = Path(__file__).resolve().parent / "long_context_batch.py"
slow = pytest.mark.slow


def judge_scripts(exercise_id: str, scripts: list, seeds: list) -> list:
    """One Verdict per script, from one launch (exercise_batch.judge_scripts with the worker that
    knows notebook 09's checks)."""
    exercise = importlib.import_module(CHECKS[exercise_id])
    items = [{"path": str(Path(p).resolve()), "seed": s} for p, s in zip(scripts, seeds)]
    env = {exercise_batch.ANSWERS_ENV: json.dumps(items), exercise_batch.EXERCISE_ENV: exercise_id}
    ran = ranks.run_on_ranks(WORKER, nproc=exercise.NPROC, env=env, echo=False,
                             timeout=60 + len(items) * 2 * exercise_batch.ANSWER_TIMEOUT,
                             dist_timeout=exercise_batch.ANSWER_TIMEOUT)
    return [exercise_batch._verdict(exercise_id, exercise, item,
                                    [m for m in ran.metrics if m.get("answer") == i], ran)
            for i, item in enumerate(items)]


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """{answer name: [Verdict, ...]} of an exercise, one launch per exercise, on first use; a
    script that does not load ("unloadable") too."""
    cache = {}

    def of(exercise: str, name: str) -> list:
        if exercise not in cache:
            folder = tmp_path_factory.mktemp(exercise)
            jobs = [(a.name, a.write(folder / f"{a.name}.py"), seed)
                    for i, a in enumerate(answers(exercise))
                    for seed in (SEEDS[i % len(SEEDS)], SEEDS[(i + 4) % len(SEEDS)])
                    [: 2 if a.expect == "solved" else 1]]
            (folder / "unloadable.py").write_text("def (:\n")
            jobs.append(("unloadable", folder / "unloadable.py", SEEDS[0]))
            got = judge_scripts(exercise, [p for _, p, _ in jobs], [s for _, _, s in jobs])
            cache[exercise] = {}
            for (key, _, _), v in zip(jobs, got):
                cache[exercise].setdefault(key, []).append(v)
        return cache[exercise][name]
    return of


@slow
@pytest.mark.parametrize("exercise,answer", [(e, a) for e in CHECKS for a in answers(e)],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_answer_is_judged_as_expected(verdicts, exercise, answer):
    for v in verdicts(exercise, answer.name):
        assert v.status == answer.expect, f"{answer.path.name} ({answer.why}):\n{v.text()}"
        if answer.expect == "wrong":
            answer.assert_named(v.message)


@slow
@pytest.mark.parametrize("exercise", CHECKS)
def test_a_script_that_does_not_load_is_wrong(verdicts, exercise):
    [v] = verdicts(exercise, "unloadable")
    assert v.status == "wrong" and "the script did not load: SyntaxError" in v.message, v.text()
