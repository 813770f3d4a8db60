"""Mutation tests of notebook 07's file-sharding check (exercise 07-file-sharding): every answer in
tests/answers/07-file-sharding/ through the check's own cases, ranks' loop (`play`) and `judge`.

All answers share ONE launch of 2 gloo ranks: a driver script imports each answer (as a module, so
its `ex.run(MyShards)` does not start) and plays the check's cases with its loader, tagged with the
answer's name; each answer's reports are then judged alone, as `check` judges a student's. The
launch path itself (`check`: solution, skeleton, a failing script) is tested in
tests/test_exercises_io_single.py.
"""
from __future__ import annotations

import pytest

from dltutor.grading import ranks
from dltutor.grading.verdict import from_problems
from dltutor.io import exercise_shards as ex
from mutants import answers

EXERCISE = "07-file-sharding"
ANSWERS = answers(EXERCISE)

DRIVER = '''
import importlib.util
import random
import sys
from pathlib import Path

import numpy as np

from dltutor.core import dist
from dltutor.io import exercise_shards as ex

with dist.session() as ctx:
    for path in sys.argv[1:]:
        name = Path(path).stem
        random.seed()                  # each answer starts from fresh process-like random states
        np.random.seed()
        try:
            spec = importlib.util.spec_from_file_location("answer_" + name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            ex.play(module.MyShards, ctx.rank, ctx.world_size, tag=name)
        except Exception:
            pass                       # play reported it (an error event); the next answer runs
'''


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """{answer name: its verdict}, from one launch of 2 ranks over every answer."""
    root = tmp_path_factory.mktemp("shards")
    cases, files = ex.prepare(root)
    paths = [str(a.write(root / f"{a.name}.py")) for a in ANSWERS]
    (root / "driver.py").write_text(DRIVER)
    ran = ranks.run_on_ranks(root / "driver.py", ex.NPROC, args=paths,
                             env={ex.FOLDER_ENV: str(root)}, timeout=150)
    assert ran.failure is None, ran.failure
    verdicts = {}
    for a in ANSWERS:
        mine = [m for m in ran.metrics if m.get("tag") == a.name]
        problems, summary = ex.judge(mine, cases, files)
        verdicts[a.name] = from_problems(EXERCISE, problems, summary)
    return verdicts


@pytest.mark.slow
@pytest.mark.parametrize("answer", ANSWERS, ids=str)
def test_answer_is_judged_as_expected(answer, judged):
    verdict = judged[answer.name]
    assert verdict.status == answer.expect, f"{answer.path.name} ({answer.why}):\n{verdict.text()}"
    if answer.expect == "wrong":
        answer.assert_named(verdict.message)
