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
    assert exercise_check.HINTS["set_epoch"] in out and "rank(s) [0, 1] wrote the checkpoint" in out
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


# Horovod's wrong answers (no broadcast, summed, ...): tests/test_mutations_ddp_horovod.py


def test_horovod_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("03_horovod_synthetic_resnet50.ipynb", "MY_HVD",
                      tmp_path / "exercise_horovod.py")
    out = outcome(capsys, hvd_exercise.check(script, echo=False), False, "not yet")
    for hint in ("init", "shard", "average", "rank0"):
        assert hvd_exercise.HINTS[hint] in out, hint


# ------------------------------------------------------------------ notebook 05: the ring
def test_reduce_scatter_solution_passes(capsys):
    out = outcome(capsys, rs_exercise.check(solution=True, echo=False), True)
    assert "on 3 ranks (vectors of" in out and "and 4 ranks (vectors of" in out
    assert "each rank sent exactly one chunk" in out
    # the course's mistakes (overwrite, whole vector, ...): tests/test_mutations_ring.py


def test_reduce_scatter_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton("05_ring_allreduce_visualizer.ipynb", "MY_STEP",
                      tmp_path / "reduce_scatter_step.py")
    out = outcome(capsys, rs_exercise.check(script, echo=False), False, "not yet")
    assert "step 1 changed nothing on any rank" in out


# ------------------------------------------------------------------ typed-in answers fail
TYPED_FINAL = '''
from torch.utils.data import DistributedSampler

from dltutor.core import dist
from dltutor.ddp import exercise as ex

ctx = dist.detect()
n = ex.flat(ex.build_model()).numel()
sampler = DistributedSampler(range(ex.samples()), num_replicas=ctx["world_size"], rank=ctx["rank"])
seen = []
for epoch in range(ex.EPOCHS):
    sampler.set_epoch(epoch)
    seen += list(sampler)
# no training: weights typed in, beside the shards a correct run reads
dist.report(event="final", params=[0.1] * n, init=[0.1] * n, seen=seen, in_group=True,
            group_open_at_end=False)
'''


def test_typed_in_weights_do_not_pass(capsys, tmp_path):
    # DDP's check only: Horovod's uses the same judge (dltutor.ddp.exercise_judge)
    script = tmp_path / "typed.py"
    script.write_text(TYPED_FINAL)
    out = outcome(capsys, exercise_check.check(script, echo=False), False)
    assert "differ from one process on the same global batches" in out
    assert "no checkpoint was written" in out


TYPED_STEP = '''
from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    # no data crosses between ranks (each rank's vector is fresh random data no other rank
    # knows, so the sums cannot be rebuilt): "as if" every rank held the same vector
    c = (rank - step) % world_size
    chunks[c] *= 2


if __name__ == "__main__":
    run(reduce_scatter_step)
'''


def test_reduce_scatter_without_communication_does_not_pass(capsys, tmp_path):
    script = tmp_path / "typed.py"
    script.write_text(TYPED_STEP)
    out = outcome(capsys, rs_exercise.check(script, echo=False), False)
    assert "P0 sent nothing in step 1" in out and "received nothing" in out
