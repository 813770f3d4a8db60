"""Mutation tests of notebook 10's resume check (exercise 10-resume): every answer in
tests/answers/10-resume/ through the check's own training (lab 10's), probes and `judge`.

All answers share ONE launch of 2 gloo ranks: a driver script runs the harness's uninterrupted
run once, then imports each answer (as a module, so its `ex.run(MyAppState)` does not start) and
plays both halves with it in the same processes (`exercise_resume.play`: save and stop at the
plan's step, then a fresh build that resumes from the newest complete checkpoint), tagged with the
answer's name; each answer's reports, with the uninterrupted run's, are then judged alone, as
`check` judges a student's. The check's real path (a SIGKILL or a stop, then a second launch:
solution, skeleton, a wrong answer) is tested in tests/test_exercises_checkpoint.py.
"""
from __future__ import annotations

import pytest

from dltutor.checkpoint import exercise_resume as ex
from dltutor.grading import ranks
from dltutor.grading.verdict import from_problems
from mutants import answers

EXERCISE = "10-resume"
ANSWERS = answers(EXERCISE)

DRIVER = '''
import importlib.util
import sys
from pathlib import Path

from torch.distributed.checkpoint.api import CheckpointException

from dltutor.checkpoint import exercise_resume as ex
from dltutor.core import dist

with dist.session() as ctx:
    plan = ex.load_plan()
    ex.reference(plan, ctx)
    for path in sys.argv[1:]:
        name = Path(path).stem
        try:
            spec = importlib.util.spec_from_file_location("answer_" + name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            ex.play(module.MyAppState, plan, ctx, tag=name)
        except (Exception, CheckpointException):
            pass                       # play reported it (an error event); the next answer runs
'''


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """{answer name: its verdict}, from one launch of 2 ranks over every answer."""
    root = tmp_path_factory.mktemp("resume")
    plan = ex.make_plan(root, mode="stop")
    paths = [str(a.write(root / f"{a.name}.py")) for a in ANSWERS]
    (root / "driver.py").write_text(DRIVER)
    ran = ranks.run_on_ranks(root / "driver.py", ex.NPROC, args=paths,
                             env={ex.PLAN_ENV: str(root)}, timeout=300)
    assert ran.failure is None, ran.failure
    reference = [m for m in ran.metrics if m.get("event") == "reference"]
    verdicts = {}
    for a in ANSWERS:
        mine = [m for m in ran.metrics if m.get("tag") == a.name]
        problems, summary = ex.judge(reference + mine, dict(plan, mode="stop"))
        verdicts[a.name] = from_problems(EXERCISE, problems, summary)
    return verdicts


@pytest.mark.slow
@pytest.mark.parametrize("answer", ANSWERS, ids=str)
def test_answer_is_judged_as_expected(answer, judged):
    verdict = judged[answer.name]
    assert verdict.status == answer.expect, f"{answer.path.name} ({answer.why}):\n{verdict.text()}"
    if answer.expect == "wrong":
        answer.assert_named(verdict.message)
