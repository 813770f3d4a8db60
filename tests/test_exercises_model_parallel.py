"""Notebook 06's exercises: tensor parallelism by hand, a GPipe forward by hand, rank placement.

For each: the hidden solution passes; named wrong copies of it fail with the message that names
the mistake (which rank, which tensor, by how much); the notebook's own unsolved skeleton (read
from the notebook) gets "not yet"; and an answer made without the communication the exercise is
about (the one-process result rebuilt on the rank from the check's seed) fails. Launches are on
2 gloo CPU ranks, tiny tensors, one per test.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from dltutor.grading import calls
from dltutor.model_parallel import exercise_place, exercise_pp, exercise_tp
from exercise_files import broken

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
TP = exercise_tp.SOLUTION


@slow
def test_tp_solution_passes(capsys):
    out = outcome(capsys, exercise_tp.check(solution=True, echo=False), "passed")
    assert "each rank made one all-reduce of 6 x 8 forward (g) and one backward (f)" in out


@slow
def test_tp_with_b2_on_every_rank_is_named(capsys, tmp_path):
    wrong = broken(TP, tmp_path / "wrong.py", ("ReduceFromTP.apply(partial) + b2",
                                               "ReduceFromTP.apply(partial + b2)"))
    out = outcome(capsys, exercise_tp.check(wrong, echo=False, seed=11), "wrong")
    assert "rank 0, output: max |difference|" in out and "rank 1, output" in out
    assert "b2 added on every rank before the all-reduce: add it once, after" in out


@slow
def test_tp_without_the_forward_all_reduce_is_named(capsys, tmp_path):
    wrong = broken(TP, tmp_path / "wrong.py", ("ReduceFromTP.apply(partial) + b2",
                                               "partial + b2"))
    out = outcome(capsys, exercise_tp.check(wrong, echo=False, seed=12), "wrong")
    assert "rank 1's output is only its partial sum" in out
    assert "rank 0 made 0 all-reduce(s) in the forward" in out


@slow
def test_tp_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("MY_TP", tmp_path / "tp_mlp.py")
    out = outcome(capsys, exercise_tp.check(script, echo=False), "not yet")
    assert "NotImplementedError" in out


FABRICATED_TP = '''
import os
import torch
from dltutor.model_parallel import exercise_tp as E

def tp_mlp(x, w1, b1, w2, b2):        # the one-process MLP, the other slices rebuilt: no message
    full, rank = E.build(int(os.environ[E.SEED_ENV])), int(os.environ["RANK"])
    cut = lambda t, r, cols=False: t[:, E.part(E.HIDDEN, r, 2)] if cols else t[E.part(E.HIDDEN, r, 2)]  # noqa: E501
    W1 = torch.cat([w1 if r == rank else cut(full["w1"], r) for r in range(2)])
    B1 = torch.cat([b1 if r == rank else cut(full["b1"], r) for r in range(2)])
    W2 = torch.cat([w2 if r == rank else cut(full["w2"], r, True) for r in range(2)], 1)
    return E.forward(x, W1, B1, W2, b2)

E.run(tp_mlp)
'''


@slow
def test_tp_answer_without_communication_fails(capsys, tmp_path):
    script = tmp_path / "fabricated.py"
    script.write_text(FABRICATED_TP)
    out = outcome(capsys, exercise_tp.check(script, echo=False, seed=13), "wrong")
    assert "output: max" not in out                  # its numbers are right ...
    assert "the right numbers without any communication" in out   # ... but nothing was split


# ------------------------------------------------------------------ 06-pipeline
PP = exercise_pp.SOLUTION


@slow
def test_pp_solution_passes(capsys):
    out = outcome(capsys, exercise_pp.check(solution=True, echo=False), "passed")
    assert "4 micro-batches of 2 crossed from stage 0 to stage 1 in order" in out


@slow
def test_pp_whole_batch_in_one_send_is_named(capsys, tmp_path):
    wrong = broken(PP, tmp_path / "wrong.py", (
        "        for micro_batch in data.chunk(m):           # m micro-batches, in order\n"
        "            dist.send(stage(micro_batch), dst=1)",
        "        dist.send(stage(data), dst=1)"), (
        "    for target in data.chunk(m):\n"
        "        activation = torch.empty(target.shape[0], width, dtype=target.dtype)\n"
        "        dist.recv(activation, src=0)",
        "    whole = torch.empty(data.shape[0], width, dtype=data.dtype)\n"
        "    dist.recv(whole, src=0)\n"
        "    for activation, target in zip(whole.chunk(m), data.chunk(m)):\n"
        "        pass"))
    out = outcome(capsys, exercise_pp.check(wrong, echo=False, seed=21), "wrong")
    assert "rank 0 sent the whole batch at once (one send of 8 x 8)" in out
    assert "loss of micro-batch" not in out          # the losses are right: only the sends differ


@slow
def test_pp_micro_batches_in_the_wrong_order_are_named(capsys, tmp_path):
    wrong = broken(PP, tmp_path / "wrong.py", ("for micro_batch in data.chunk(m):",
                                               "for micro_batch in reversed(data.chunk(m)):"))
    out = outcome(capsys, exercise_pp.check(wrong, echo=False, seed=22), "wrong")
    assert "send 0 of rank 0 carried micro-batch 3's activations" in out
    assert "rank 1, mean loss" in out


@slow
def test_pp_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("MY_PP", tmp_path / "gpipe_forward.py")
    out = outcome(capsys, exercise_pp.check(script, echo=False), "not yet")
    assert "NotImplementedError" in out


FABRICATED_PP = '''
import os
from dltutor.model_parallel import exercise_pp as E

def gpipe_forward(stage, rank, data, m, loss_fn, width):   # stage 0 rebuilt on rank 1: no message
    if rank == 0:
        return None
    full = E.build(int(os.environ[E.SEED_ENV]))
    first = E.stage(full["stage0"])
    return [loss_fn(stage(first(x)), y) for x, y in zip(full["x"].chunk(m), data.chunk(m))]

E.run(gpipe_forward)
'''


@slow
def test_pp_answer_without_communication_fails(capsys, tmp_path):
    script = tmp_path / "fabricated.py"
    script.write_text(FABRICATED_PP)
    out = outcome(capsys, exercise_pp.check(script, echo=False, seed=23), "wrong")
    assert "nothing crossed: rank 0 made no dist.send/isend" in out


# ------------------------------------------------------------------ 06-placement
def pp_fastest(rank, tp, pp, dp, gpus_per_node):
    return (rank // pp) % tp, rank % pp, rank // (tp * pp)


def tp_slowest(rank, tp, pp, dp, gpus_per_node):
    return rank // (pp * dp), rank % pp, (rank // pp) % dp


def seed_job_only(rank, tp, pp, dp, gpus_per_node):      # written for the 32-GPU job alone
    return rank % 4, (rank // 4) % 4, rank // 16


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_placement_solution_passes_on_unseen_shapes(capsys, seed):
    out = outcome(capsys, exercise_place.check(solution=True, seed=seed), "passed")
    assert "8 nodes x 8 GPUs, TP=8 PP=4 DP=2" in out
    assert exercise_place.describe(exercise_place.SEED_CASE) not in out   # the one it has seen


@pytest.mark.parametrize("place,shape,why", [
    (pp_fastest, "on 8 nodes x 8 GPUs, TP=8 PP=4 DP=2", "your pp changes"),
    (tp_slowest, "on 2 nodes x 4 GPUs, TP=2 PP=2 DP=2",
     "the TP group of ranks [0, 4] is on nodes [0, 1]"),
    (seed_job_only, "on 2 nodes x 4 GPUs, TP=2 PP=2 DP=2", "not one rank per (tp, pp, dp)"),
])
def test_placement_mistakes_name_the_first_failing_shape(capsys, place, shape, why):
    out = outcome(capsys, exercise_place.check(place, seed=0), "wrong")
    assert shape in out and why in out


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
