"""Notebook 06's exercises: tensor parallelism by hand, a GPipe forward by hand, rank placement.

For each, through the check a student runs: the hidden solution passes and the notebook's own
unsolved skeleton (read from the notebook) gets "not yet". The wrong and right answers (named
mistakes, answers without communication, right ones written differently) are in tests/answers/
and judged by tests/test_mutations_model_parallel.py. Launches are on 2 gloo CPU ranks, tiny
tensors, one per test.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from dltutor.grading import calls
from dltutor.model_parallel import exercise_place, exercise_pp, exercise_tp

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "course" / "notebooks" / "06_model_parallelism.ipynb"
slow = pytest.mark.slow


def cell(startswith: str) -> str:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    found = [c.source for c in nb.cells
             if c.cell_type == "code" and c.source.startswith(startswith)]
    assert len(found) == 1, f"expected one code cell starting {startswith!r}, found {len(found)}"
    return found[0]


def skeleton(variable: str, dest: Path) -> Path:
    """The notebook's `%%writefile {variable}` cell, as the unsolved student's file."""
    head = f"%%writefile {{{variable}}}\n"
    dest.write_text(cell(head)[len(head):] + "\n")
    return dest


def outcome(capsys, ok: bool, status: str) -> str:
    out = capsys.readouterr().out
    assert ok is (status == "passed"), out
    assert out.startswith(f"{status}:") and out.count(f"{status}:") == 1, out
    return out


# ------------------------------------------------------------------ 06-tensor-parallel
@slow
def test_tp_solution_passes(capsys):
    out = outcome(capsys, exercise_tp.check(solution=True, echo=False), "passed")
    assert re.search(r"each rank made one all-reduce of \d+ x \d+ forward \(g\) and one "
                     r"backward \(f\)", out)


@slow
def test_tp_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("MY_TP", tmp_path / "tp_mlp.py")
    out = outcome(capsys, exercise_tp.check(script), "not yet")    # echo on, as in the notebook
    assert "NotImplementedError" in out
    assert "Traceback" not in out and "[rank" not in out, out   # the ranks' tracebacks not echoed


# ------------------------------------------------------------------ 06-pipeline
@slow
def test_pp_solution_passes(capsys):
    out = outcome(capsys, exercise_pp.check(solution=True, echo=False), "passed")
    assert re.search(r"\d micro-batches of \d crossed from stage 0 to stage 1 in order", out)
    assert "each sent before stage 0 started the next" in out


@slow
def test_pp_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("MY_PP", tmp_path / "gpipe_forward.py")
    out = outcome(capsys, exercise_pp.check(script), "not yet")    # echo on, as in the notebook
    assert "NotImplementedError" in out
    assert "Traceback" not in out and "[rank" not in out, out   # the ranks' tracebacks not echoed


# ------------------------------------------------------------------ 06-placement
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_placement_solution_passes_on_unseen_shapes(capsys, seed):
    out = outcome(capsys, exercise_place.check(solution=True, seed=seed), "passed")
    assert "8 nodes x 8 GPUs, TP=8 PP=4 DP=2" in out
    assert exercise_place.describe(exercise_place.SEED_CASE) not in out   # the one it has seen


def test_placement_notebook_skeleton_says_not_yet_and_the_seed_case_is_answered(capsys):
    scope = {}
    exec(cell("def place(rank, tp, pp, dp, gpus_per_node):"), scope)
    outcome(capsys, exercise_place.check(scope["place"]), "not yet")
    rows, answer = exercise_place.seed_case(exercise_place.reference_place())
    assert len(rows) == 4 and rows[0]["gpu5"] == "t1p1d0"
    assert "between stages 1 and 2" in answer      # seed 001's "between stages 2 and 3"


# ------------------------------------------------------------------ the call watcher
def test_watched_refuses_records_and_restores():
    import torch.distributed as dist
    from torch.distributed import all_gather, all_reduce
    space = {"all_reduce": all_reduce, "all_gather": all_gather}
    log, send = calls.CallLog(), dist.send
    with calls.watched(log, record=("send",), namespaces=[space], why="point to point only"):
        for fn in (dist.all_reduce, space["all_reduce"], space["all_gather"]):
            with pytest.raises(RuntimeError, match="is not part of this exercise: point to point"):
                fn(None)
        assert dist.send is not send and dist.distributed_c10d.send is dist.send   # recorded
    assert dist.all_reduce is all_reduce and space["all_gather"] is all_gather and dist.send is send
