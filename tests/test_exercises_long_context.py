"""Notebook 09's exercises: the ring-attention merge and loop (09-ring-attention, 3 ranks) and MoE
dispatch/combine (09-moe-dispatch, 2 ranks), through the check a student runs: the hidden
solution passes, the notebook's own unsolved skeleton (read from the notebook) gets "not yet", and
a script that raises on one rank is "wrong" with that rank and its error named. The wrong and right
answers are in tests/answers/09-*/, judged by tests/test_mutations_long_context.py.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from dltutor.context_parallel import exercise_ring
from dltutor.experts import exercise_dispatch

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "course" / "notebooks" / "09_long_sequences_and_experts.ipynb"
slow = pytest.mark.slow


def skeleton(variable: str, dest: Path) -> Path:
    """The notebook's `%%writefile {variable}` cell, as the unsolved student's file."""
    head = f"%%writefile {{{variable}}}\n"
    found = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
             if c.cell_type == "code" and c.source.startswith(head)]
    assert len(found) == 1, f"expected one code cell starting {head!r}, found {len(found)}"
    dest.write_text(found[0][len(head):] + "\n")
    return dest


def outcome(capsys, ok: bool, status: str) -> str:
    out = capsys.readouterr().out
    assert ok is (status == "passed"), out
    assert out.startswith(f"{status}:") and out.count(f"{status}:") == 1, out
    return out


def crashing(tmp_path: Path, solution: str, line: str, replacement: str) -> Path:
    """The course's solution with `line` replaced: a script that raises on rank 1 only."""
    from dltutor.core import course
    text = course.lab(solution).read_text()
    assert line in text
    dest = tmp_path / "crash.py"
    dest.write_text(text.replace(line, replacement, 1))
    return dest


# ------------------------------------------------------------------ 09-ring-attention
@slow
def test_ring_solution_passes(capsys):
    out = outcome(capsys, exercise_ring.check(solution=True, echo=False), "passed")
    assert re.search(r"on 3 ranks \(batch \d, heads \d, sequence \d+ in chunks of \d, head_dim "
                     r"\d\), the merge follows the online-softmax rule, and the non-causal and "
                     r"causal outputs match one-process attention", out), out


@slow
def test_ring_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("MY_RING", tmp_path / "ring_attention.py")
    out = outcome(capsys, exercise_ring.check(script), "not yet")   # echo on, as in the notebook
    assert "NotImplementedError" in out
    assert "Traceback" not in out and "[rank" not in out, out


@slow
def test_ring_crash_on_one_rank_is_named(capsys, tmp_path):
    script = crashing(tmp_path, exercise_ring.SOLUTION, "    n = q.shape[2]\n",
                      "    n = q.shape[2]\n    if rank == 1:\n"
                      "        raise ValueError('rank 1 gives up')\n")
    out = outcome(capsys, exercise_ring.check(script, echo=False), "wrong")
    assert "rank 1 failed in the non-causal run: ValueError: rank 1 gives up" in out, out


# ------------------------------------------------------------------ 09-moe-dispatch
@slow
def test_dispatch_solution_passes(capsys):
    out = outcome(capsys, exercise_dispatch.check(solution=True, echo=False), "passed")
    assert re.search(r"every rank's output matches the one-process MoE \(max error .*\) with rows "
                     r"sent \[\[.*\]\] \(rank by rank\), expert \d getting no token and rank \d "
                     r"sending nothing to the other rank", out), out


@slow
def test_dispatch_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("MY_MOE", tmp_path / "moe_dispatch.py")
    out = outcome(capsys, exercise_dispatch.check(script), "not yet")
    assert "NotImplementedError" in out
    assert "Traceback" not in out and "[rank" not in out, out


@slow
def test_dispatch_crash_on_one_rank_is_named(capsys, tmp_path):
    script = crashing(tmp_path, exercise_dispatch.SOLUTION, "    T, k = experts.shape\n",
                      "    T, k = experts.shape\n    if rank == 1:\n"
                      "        expert(0, x)           # expert 0 lives on rank 0\n")
    out = outcome(capsys, exercise_dispatch.check(script, echo=False), "wrong")
    assert "rank 1 failed: ValueError: expert 0 lives on rank 0, not on rank 1" in out, out
    assert "group the rows by destination rank" in out, out


# ------------------------------------------------------------------ the routing drawn per attempt
@pytest.mark.parametrize("seed", range(12))
def test_every_routing_has_uneven_splits_an_idle_expert_and_a_silent_rank(seed):
    from dltutor.experts.dispatch_judge import plan
    data = exercise_dispatch.routing(seed)
    sent = plan(data, exercise_dispatch.NPROC)["sent"]
    assert len({len(x) for x in data["x"]}) == len(data["x"])                  # uneven
    assert all(data["empty"] not in e.reshape(-1).tolist() for e in data["experts"])
    s = data["silent"]
    assert sum(sent[s]) == sent[s][s]                                          # stays home
    assert sent[1 - s][s] > 0                                                  # the other sends
    assert (data["weights"][0] < 1).all()                 # a weight left out changes the output
