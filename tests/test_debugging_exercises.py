"""Notebook 08's exercises: diagnose an unseen broken run; make a hanging script finish.

The diagnosis never gives the answer away (verdicts, tries, runs handed out again) and accepts
numbers as numbers; the repair's cases hold the edges on every seed, a rank's values cannot be
computed by another rank, and the notebook hands out the hanging script. The answers of both
checks (mutation tests) are in tests/test_mutations_debug.py. Real 2-rank gloo runs.
"""
from __future__ import annotations

import random
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from dltutor.core import course
from dltutor.debug import exercise_diagnose as exd
from dltutor.debug import exercise_hang as exh

pytestmark = pytest.mark.slow
NOTEBOOK = Path(__file__).resolve().parents[1] / "course" / "notebooks" / "08_debugging_distributed.ipynb"


def cell_starting(head: str) -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(head)]
    assert len(cells) == 1, f"expected one cell starting {head!r}, found {len(cells)}"
    return cells[0]


def verdict(capsys, ok, status):
    out = capsys.readouterr().out
    assert ok is (status == "passed"), out
    assert out.count(f"{status}:") == 1, out
    return out


@pytest.fixture(scope="module")
def runs():
    """Two broken runs (a launch each), shared by the tests of the diagnosis."""
    return {v: exd._run_variant(*v) for v in [("kill", 1), ("straggler", 1)]}


# ------------------------------------------------------------------ the diagnosis
def test_a_wrong_verdict_never_states_the_true_rank_or_cause(runs, capsys):
    run = runs[("straggler", 1)]
    exd._RUNS[run.token]["wrong"] = 0
    out = verdict(capsys, exd.check({"rank": 0, "cause": "nan"}, run), "wrong")
    assert "straggler" not in out and "rank 1" not in out, out
    assert "does not show a NaN/inf starting on rank 0" in out and "2 of 3 tries left" in out


def test_tries_are_limited_per_run_and_typos_do_not_count(runs, capsys):
    run = runs[("kill", 1)]
    exd._RUNS[run.token]["wrong"] = 0
    out = verdict(capsys, exd.check({"rank": 1, "cause": "slow"}, run), "wrong")
    assert "'cause' must be one of" in out
    out = verdict(capsys, exd.check({"rank": 1.0, "cause": "killed"}, run), "wrong")
    assert "whole number" in out
    for left in (2, 1):
        out = verdict(capsys, exd.check({"rank": 0, "cause": "killed"}, run), "wrong")
        assert f"{left} of 3 tries left" in out
    out = verdict(capsys, exd.check({"rank": 0, "cause": "straggler"}, run), "wrong")
    assert "no tries left for this run" in out
    out = verdict(capsys, exd.check({"rank": 1, "cause": "killed"}, run), "wrong")
    assert "draw a new token" in out                     # right, but after the last try
    verdict(capsys, exd.check({"rank": 1, "cause": "killed"}, run, reference=True), "passed")
    exd._RUNS[run.token]["wrong"] = 0                   # numbers are numbers, case is case
    verdict(capsys, exd.check({"rank": np.int64(1), "cause": " Killed"}, run), "passed")


def test_untouched_answers_and_foreign_runs_are_not_yet(runs, capsys):
    run = runs[("straggler", 1)]
    assert cell_starting("ANSWER = None").startswith("ANSWER = None")
    verdict(capsys, exd.check(None, run), "not yet")
    fake = exd.Mystery(run.token, run.steps(), {}, None, ())     # not the run the cell showed
    out = verdict(capsys, exd.check({"rank": 1, "cause": "straggler"}, fake), "not yet")
    assert "run the mystery cell first" in out


def test_mystery_draws_every_variant_and_shows_the_same_run_again(runs, monkeypatch, capsys):
    drawn = []

    def fake_run(fault, rank, token, echo=False):
        drawn.append((fault, rank))
        return exd._register(exd.Mystery(token, runs[("straggler", 1)].steps(), {}, None, ()))
    monkeypatch.setattr(exd, "_run_variant", fake_run)
    for i in range(300):
        exd.mystery(f"t-{i}")
    assert set(drawn) == {(f, r) for f in exd._FAULTS for r in (0, 1)}
    first = exd.mystery("t-0")
    assert len(drawn) == 300 and first is exd.mystery("t-0")      # shown again, not re-run
    assert "mystery run t-0" in capsys.readouterr().out


# ------------------------------------------------------------------ the repair
def test_the_notebook_hands_out_the_hanging_script_and_it_is_not_yet(capsys):
    cell = cell_starting("%%writefile {MY_FIX}")
    assert cell.split("\n", 1)[1].strip() == course.lab(exh.HANDOUT).read_text().strip()
    out = verdict(capsys, exh.check(course.lab(exh.HANDOUT)), "not yet")
    assert "not run: this is the script as handed out, which hangs" in out, out   # says it was not run
    verdict(capsys, exh.check(Path("/nonexistent/uneven_sum.py")), "not yet")


def test_the_cases_hold_the_edges_on_every_seed():
    for seed in random.Random(0).sample(range(1, 10 ** 6), 200):
        c = exh.case_counts(seed)
        assert c[0][1] > c[0][0] and c[1][0] > c[1][1]                 # either rank holds more
        assert 0 in c[2] and max(c[2]) > 0                             # a rank holds none
        assert min(c[3]) >= 600 and abs(c[3][0] - c[3][1]) >= 300     # beyond any small pad
        assert max(max(x) for x in c[:3]) <= 10


def test_a_ranks_values_are_its_own_and_unpredictable(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(exh.SEED_ENV, "5")
    monkeypatch.setattr(exh, "_drawn", {})
    with pytest.raises(ValueError, match="no value crosses between ranks"):
        exh.my_values(1, 0)
    mine = exh.my_values(0, 0)
    assert mine == exh.my_values(0, 0) and len(mine) == exh.case_counts(5)[0][0]
    monkeypatch.setattr(exh, "_drawn", {})           # the same seed, another process: new values
    assert exh.my_values(0, 0) != mine
    exh.report_total(np.float64(1.5), 0)
    exh.report_total(torch.tensor([2.5], dtype=torch.float64), np.int64(1))
    with pytest.raises(TypeError, match="one number"):
        exh.report_total(torch.zeros(3), 0)
    assert re.findall(r'"total": ([\d.]+)', capsys.readouterr().out) == ["1.5", "2.5"]


def test_the_solution_passes(capsys):
    out = verdict(capsys, exh.check(solution=True), "passed")
    assert "every rank finished all 4 cases" in out


def test_the_reference_diagnosis_runs_on_a_run_of_its_own_not_the_students():
    """Run All must not print the answer to the student's mystery: the reference solution is
    checked on a broken run drawn for it."""
    import nbformat
    from pathlib import Path
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/08_debugging_distributed.ipynb",
                       as_version=4)
    [ref] = [c.source for c in nb.cells if c.cell_type == "code" and "diagnose_answer.answer(" in c.source]
    assert "answer(mystery)" not in ref and "exercise_diagnose.mystery(exercise_diagnose.new_token())" in ref
