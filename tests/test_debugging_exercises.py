"""Notebook 08's exercises: diagnose an unseen broken run; make a hanging script finish.

The course's solutions pass; named wrong answers and scripts fail with what differs; the notebook's
untouched cells get "not yet"; an answer typed in for another run fails. Real 2-rank gloo runs.
"""
from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import nbformat
import pytest

from dltutor.core import course
from dltutor.debug import exercise_diagnose as exd
from dltutor.debug import exercise_hang as exh
from exercise_files import broken

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


def solution():
    spec = importlib.util.spec_from_file_location("diagnose_answer", course.lab(exd.SOLUTION))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def straggler0():
    return exd.run_fault("straggler", fault_rank=0, fault_step=3, pg_timeout=exd.PG_TIMEOUT,
                         checks=True)


@pytest.fixture(scope="module")
def killed1():
    return exd.run_fault("kill", fault_rank=1, fault_step=3, pg_timeout=exd.PG_TIMEOUT,
                         checks=True)


# ------------------------------------------------------------------ the diagnosis
def test_tokens_pick_every_variant_and_always_the_same_one():
    seen = {exd.variant(f"student-{i}") for i in range(300)}
    assert seen == {(f, r) for f in exd.VARIANTS for r in (0, 1)}
    assert exd.variant("ana-1234") == exd.variant("ana-1234")
    assert exd.new_token() != exd.new_token()


@pytest.mark.parametrize("fault,rank", [("skip", 0), ("nan", 1), ("outside_ddp", 0),
                                        ("random_op", 1)])
def test_the_check_reads_what_each_variant_did(fault, rank, capsys):
    out = exd.run_fault(fault, fault_rank=rank, fault_step=3, pg_timeout=exd.PG_TIMEOUT, checks=True)
    truth = {"rank": rank, "cause": exd.VARIANTS[fault]}
    assert exd.what_happened(out) == truth
    assert solution().answer(out) == truth
    verdict(capsys, exd.check(truth, out), "passed")


def test_solution_passes_and_named_wrong_answers_fail(straggler0, killed1, capsys):
    truth = {"rank": 0, "cause": "straggler"}
    assert exd.what_happened(straggler0) == truth
    verdict(capsys, exd.check(solution().answer(straggler0), straggler0, reference=True), "passed")
    out = verdict(capsys, exd.check({"rank": 1, "cause": "straggler"}, straggler0), "wrong")
    assert "you named rank 1; the run points at rank 0" in out
    out = verdict(capsys, exd.check({"rank": 0, "cause": "nan"}, straggler0), "wrong")
    assert "you named the cause 'nan'; the run shows 'straggler'" in out
    assert exd.what_happened(killed1) == {"rank": 1, "cause": "killed"}
    verdict(capsys, exd.check(solution().answer(killed1), killed1), "passed")


def test_an_answer_typed_in_for_another_run_fails(straggler0, killed1, capsys):
    typed = {"rank": 0, "cause": "straggler"}          # right for straggler0 only
    out = verdict(capsys, exd.check(typed, killed1), "wrong")
    assert "the run points at rank 1" in out and "'killed'" in out
    out = verdict(capsys, exd.check(typed, {"rank": 0}), "not yet")   # no run: nothing to compare
    assert "run the mystery cell first" in out


def test_the_notebooks_untouched_answer_is_not_yet(straggler0, capsys):
    assert cell_starting("ANSWER = None").startswith("ANSWER = None")
    verdict(capsys, exd.check(None, straggler0), "not yet")
    out = verdict(capsys, exd.check({"rank": 0, "cause": "slow"}, straggler0), "wrong")
    assert "'cause' must be one of" in out


# ------------------------------------------------------------------ the repair
def _seed_with_shortest(count: int) -> int:
    return next(s for s in range(1, 1000) if 3 + random.Random(s).randrange(3) == count)


def test_the_notebook_hands_out_the_hanging_script_and_it_is_not_yet(capsys):
    cell = cell_starting("%%writefile {MY_FIX}")
    handout = course.lab(exh.HANDOUT).read_text()
    assert cell.split("\n", 1)[1].strip() == handout.strip()
    verdict(capsys, exh.check(course.lab(exh.HANDOUT)), "not yet")


def test_fix_hang_solution_passes(capsys):
    out = verdict(capsys, exh.check(solution=True, seed=7), "passed")
    assert "both ranks finished" in out


def test_a_script_that_still_hangs_fails_within_the_timeout(capsys, tmp_path):
    still = tmp_path / "still.py"
    still.write_text(course.lab(exh.HANDOUT).read_text() + "\n# I changed a comment only\n")
    out = verdict(capsys, exh.check(still, seed=3), "wrong")
    assert "did not finish" in out and "Timed out" in out, out


def test_a_script_without_the_all_reduce_is_named(capsys, tmp_path):
    wrong = broken(exh.SOLUTION, tmp_path / "local.py", ("    tdist.all_reduce(total)", "    pass"))
    out = verdict(capsys, exh.check(wrong, seed=11), "wrong")
    assert "its own values only: all-reduce the local sum" in out


def test_a_script_that_stops_at_the_shortest_rank_is_named(capsys, tmp_path):
    wrong = broken(exh.SOLUTION, tmp_path / "short.py", ("[sum(values)]", "[sum(values[:3])]"))
    out = verdict(capsys, exh.check(wrong, seed=_seed_with_shortest(3)), "wrong")
    assert "the values beyond the shortest rank were dropped" in out


def test_a_typed_in_total_fails(capsys, tmp_path):
    values = [exh.my_values(r, 2, seed=5) for r in range(2)]
    typed = broken(exh.SOLUTION, tmp_path / "typed.py",
                   ("    tdist.all_reduce(total)",
                    f"    total = torch.tensor([{sum(map(sum, values))!r}], dtype=torch.float64)"))
    verdict(capsys, exh.check(typed, seed=5), "passed")          # right for seed 5 only
    out = verdict(capsys, exh.check(typed, seed=6), "wrong")
    assert "neither the total nor a part of it" in out or "reported" in out
