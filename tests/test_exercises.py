"""The exercises where the student writes the distributed code (notebooks 02, 03, 05).

For each: the hidden solution passes the self-check on real ranks; a known wrong copy of it fails
with the message that names the mistake; the notebook's own unsolved skeleton (the `%%writefile`
cell, read from the notebook) gets "not yet" and raises nothing. One launch per test, tiny sizes.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from dltutor.allreduce import exercise as rs_exercise
from dltutor.ddp import exercise_check
from dltutor.horovod import exercise as hvd_exercise
from exercise_files import broken

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def skeleton(notebook: str, variable: str, dest: Path) -> Path:
    """The notebook's `%%writefile {variable}` cell, as the unsolved student's file."""
    nb = nbformat.read(ROOT / "course" / "notebooks" / notebook, as_version=4)
    head = f"%%writefile {{{variable}}}\n"
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(head)]
    assert len(cells) == 1, f"{notebook}: expected one `{head.strip()}` cell, found {len(cells)}"
    dest.write_text(cells[0][len(head):] + "\n")
    return dest


def outcome(capsys, ok: bool, passed: bool, status: str = "") -> str:
    """The check's printed verdict: exactly one "passed:", "not yet:" or "wrong:" line."""
    out = capsys.readouterr().out
    assert ok is passed, out
    head = "passed:" if passed else f"{status or 'wrong'}:"
    assert out.count(head) == 1 and sum(out.count(h) for h in
                                        ("passed:", "not yet:", "wrong:")) == 1, out
    return out


# ------------------------------------------------------------------ notebook 02: DDP
def test_ddp_solution_passes(capsys):
    out = outcome(capsys, exercise_check.check(solution=True, echo=False), True)
    assert "both ranks agree" in out and "written by rank 0" in out


def test_ddp_without_set_epoch_and_every_rank_saving_is_named(capsys, tmp_path):
    wrong = broken("02_ddp/solutions/exercise_ddp.py", tmp_path / "wrong.py",
                   ("    sampler.set_epoch(epoch)", "    pass"), ("if rank == 0:", "if True:"))
    out = outcome(capsys, exercise_check.check(wrong, echo=False), False)
    assert "sampler.set_epoch(epoch)" in out and "rank(s) [0, 1] wrote the checkpoint" in out
    assert "not averaged" not in out       # DDP is there: the ranks agree with each other


def test_ddp_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("02_ddp_multi_gpu.ipynb", "MY_DDP", tmp_path / "exercise_ddp.py")
    out = outcome(capsys, exercise_check.check(script, echo=False), False, "not yet")
    for hint in ("init", "shard", "average", "rank0"):
        assert exercise_check.HINTS[hint] in out, hint


# ------------------------------------------------------------------ notebook 03: Horovod
def test_horovod_solution_passes(capsys):
    out = outcome(capsys, hvd_exercise.check(solution=True, echo=False), True)
    assert "both ranks agree" in out


def test_horovod_without_broadcast_is_named(capsys, tmp_path):
    wrong = broken("03_horovod/solutions/exercise_horovod.py", tmp_path / "wrong.py",
                   ("hvd.broadcast_parameters(model.state_dict(), root_rank=0)", "pass"))
    out = outcome(capsys, hvd_exercise.check(wrong, echo=False), False)
    assert hvd_exercise.HINTS["broadcast"] in out and "not averaged" not in out


def test_horovod_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("03_horovod_synthetic_resnet50.ipynb", "MY_HVD",
                      tmp_path / "exercise_horovod.py")
    out = outcome(capsys, hvd_exercise.check(script, echo=False), False, "not yet")
    for hint in ("init", "shard", "average", "rank0"):
        assert hvd_exercise.HINTS[hint] in out, hint


# ------------------------------------------------------------------ notebook 05: the ring
def test_reduce_scatter_solution_passes(capsys):
    out = outcome(capsys, rs_exercise.check(solution=True, echo=False), True)
    assert "all 2 steps match the step model on 3 ranks" in out


def test_reduce_scatter_that_overwrites_is_named(capsys, tmp_path):
    wrong = broken("05_allreduce/solutions/reduce_scatter_step.py", tmp_path / "wrong.py",
                   ("chunks[recv_chunk] += incoming", "chunks[recv_chunk].copy_(incoming)"))
    out = outcome(capsys, rs_exercise.check(wrong, echo=False), False)
    assert "after reduce-scatter step 1 of 2" in out
    assert "P1, chunk 0: holds A0, the step model says B0+A0" in out


def test_reduce_scatter_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("05_ring_allreduce_visualizer.ipynb", "MY_STEP",
                      tmp_path / "reduce_scatter_step.py")
    out = outcome(capsys, rs_exercise.check(script, echo=False), False, "not yet")
    assert "step 1 changed nothing on any rank" in out


def test_contributions_decode_the_ranks_summed():
    # rank r holds (i + 1) * 10**r at element i: a sum's digits name what went into it
    assert rs_exercise.contributions(3 * (1 + 10 + 100), 2, 3) == [0, 1, 2]
    assert rs_exercise.contributions(2 * 20, 1, 3) == [1, 1]          # rank 1 added twice
    assert rs_exercise.contributions(7.5, 0, 3) is None


# ------------------------------------------------------------------ typed-in answers fail
TYPED_FINAL = '''
from dltutor.core import dist
from dltutor.ddp import exercise as ex
from dltutor.ddp.exercise_check import shard_order

ctx = dist.detect()
n = ex.flat(ex.build_model()).numel()
# no training: weights typed in, the right shard order copied from the check's own helper
dist.report(event="final", params=[0.1] * n, init=[0.1] * n,
            seen=shard_order(ctx["world_size"], ctx["rank"]), in_group=True,
            group_open_at_end=False)
'''


@pytest.mark.parametrize("engine", ["ddp", "horovod"])
def test_typed_in_weights_do_not_pass(capsys, tmp_path, engine):
    script = tmp_path / "typed.py"
    script.write_text(TYPED_FINAL)
    check = exercise_check.check if engine == "ddp" else hvd_exercise.check
    out = outcome(capsys, check(script, echo=False), False)
    assert "differ from one process on the same global batches" in out
    assert "no checkpoint was written" in out


TYPED_STEP = '''
from dltutor.allreduce import ring
from dltutor.allreduce.exercise import rank_vector, run


def reduce_scatter_step(chunks, rank, world_size, step):
    # the right sums, rebuilt from the known vectors: no data crosses between ranks
    c = (rank - step) % world_size
    a, b = ring.chunk_bounds(sum(x.numel() for x in chunks), world_size)[c]
    chunks[c] += sum(rank_vector((rank - k) % world_size)[a:b] for k in range(1, step + 1))


if __name__ == "__main__":
    run(reduce_scatter_step)
'''


def test_reduce_scatter_without_communication_does_not_pass(capsys, tmp_path):
    script = tmp_path / "typed.py"
    script.write_text(TYPED_STEP)
    out = outcome(capsys, rs_exercise.check(script, echo=False), False)
    assert "no data crossed between ranks" in out and "P0 in step 1" in out
