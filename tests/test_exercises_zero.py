"""Notebook 04's exercises: ZeRO-1 by hand on 2 gloo ranks (04-zero1), the memory formula as a
function (04-memory).

ZeRO-1: the hidden solution passes; named wrong copies of it (no all-gather, full Adam state on
every rank, gradients not averaged, shards that leave a gap) fail with the message that names
the mistake; the notebook's skeleton gets "not yet"; a script that reports made-up results
without training fails. One launch per test, tiny sizes. The memory function's tests run in the
kernel only (no launch).
"""
from __future__ import annotations

import random
from pathlib import Path

import nbformat
import pytest

from dltutor.core.units import GiB
from dltutor.zero import memory
from dltutor.zero import exercise_memory as mem_ex
from dltutor.zero import exercise_zero1 as z1
from exercise_files import broken as broken_copy

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "course" / "notebooks" / "04_deepspeed_out_of_core_bert.ipynb"
SOLUTION = "04_deepspeed/solutions/zero1_by_hand.py"
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)
slow = pytest.mark.slow


def cells() -> list[str]:
    return [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]


def skeleton(dest: Path) -> Path:
    """The notebook's `%%writefile {MY_ZERO1}` cell, as the unsolved student's file."""
    head = "%%writefile {MY_ZERO1}\n"
    found = [c for c in cells() if c.startswith(head)]
    assert len(found) == 1, f"expected one `{head.strip()}` cell, found {len(found)}"
    dest.write_text(found[0][len(head):] + "\n")
    return dest


def broken(dest: Path, *edits: tuple[str, str]) -> Path:
    """A named wrong copy of the ZeRO-1 solution (`exercise_files.broken`)."""
    return broken_copy(SOLUTION, dest, *edits)


def outcome(capsys, ok: bool, head: str) -> str:
    out = capsys.readouterr().out
    assert ok is (head == "passed:"), out
    assert out.startswith(head), out
    return out


# ------------------------------------------------------------------ 04-zero1, on 2 ranks
@slow
def test_zero1_solution_passes(capsys):
    out = outcome(capsys, z1.check(solution=True), "passed:")
    assert "matches one process's torch.optim.Adam after each of 3 steps" in out
    assert "each rank holds 51 % and 49 % of its Adam state" in out


@slow
def test_zero1_without_all_gather_is_named(capsys, tmp_path):
    wrong = broken(tmp_path / "wrong.py", ("dist.all_gather(parts, mine)",
                                           "parts = [mine] * self.world_size"))
    # each rank copies only its own shard back (the other ranks' places keep the flat start)
    wrong.write_text(wrong.read_text().replace(
        "full = torch.empty(self.numel, dtype=mine.dtype)",
        "full = torch.cat([p.detach().reshape(-1) for p in self.params])").replace(
        "            full[lo:hi] = part[:hi - lo]",
        "            full[lo:hi] = part[:hi - lo] if r == self.rank else full[lo:hi]"))
    out = outcome(capsys, z1.check(wrong), "wrong:")
    assert "after step 1 of 3:" in out
    assert "rank 0 updated only 0.weight[0:29] (flat 0:29, its shard)" in out
    assert "rank 1 updated only 0.weight[29:30], 0.bias, 2.weight, 2.bias (flat 29:57" in out
    assert "all-gather the shards into every rank's parameters" in out


@slow
def test_zero1_with_full_adam_state_is_named(capsys, tmp_path):
    wrong = broken(tmp_path / "wrong.py",
                   ("self.shard = flat[self.lo:self.hi].clone()", "self.shard = flat.clone()"),
                   ("self.shard.grad = grad[self.lo:self.hi].clone()", "self.shard.grad = grad"),
                   ("mine[:self.hi - self.lo] = self.shard.detach()",
                    "mine[:self.hi - self.lo] = self.shard.detach()[self.lo:self.hi]"))
    out = outcome(capsys, z1.check(wrong), "wrong:")
    assert "rank 0 holds 100 % of the Adam state of one process" in out
    assert "rank 1 holds 100 % of the Adam state of one process" in out
    assert "keep only your shard" in out
    assert "after step" not in out                  # the parameters themselves are right


@slow
def test_zero1_gradients_not_averaged_is_named(capsys, tmp_path):
    wrong = broken(tmp_path / "wrong.py", ("dist.all_reduce(grad)", "pass"),
                   ("grad /= self.world_size", "pass"))
    out = outcome(capsys, z1.check(wrong), "wrong:")
    assert "the gradients were not all-reduced" in out and "after step 1 of 3" in out


@slow
def test_zero1_shards_with_a_gap_are_named(capsys, tmp_path):
    wrong = broken(tmp_path / "wrong.py", ("    size = -(-numel // world_size)\n    lo = min(",
                                           "    size = numel // world_size\n    lo = min("))
    out = outcome(capsys, z1.check(wrong), "wrong:")
    assert ("the ranks together keep Adam state for 56 elements ([28, 28] per rank), the model "
            "has 57: the shards leave a gap") in out
    assert "2.bias[2:3] (flat element 56)" in out         # the element no rank stepped


@slow
def test_zero1_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton(tmp_path / "zero1_by_hand.py")
    out = outcome(capsys, z1.check(script), "not yet:")
    assert "NotImplementedError" in out


FABRICATED = '''# Reports what a ZeRO-1 run would report, without training: the initial parameters
# and half of one process's Adam state, in the harness's own record, on every rank.
from dltutor.core import dist
from dltutor.zero import exercise_zero1 as ex
import os

seed = int(os.environ.get(ex.SEED_ENV, "0"))
with dist.session() as ctx:
    params = ex.flat(ex.build_model(seed))
    _, full = ex.reference(seed)
    for step in range(1, ex.STEPS + 1):
        dist.report(event="zero1_step", step=step, seed=seed, params=params,
                    state_bytes=full // 2, state_elems=params.numel() // 2 + ctx.rank)
'''


@slow
def test_zero1_fabricated_report_fails(capsys, tmp_path):
    script = tmp_path / "fabricated.py"
    script.write_text(FABRICATED)
    out = outcome(capsys, z1.check(script), "wrong:")
    assert "no rank's parameters changed" in out


def test_zero1_records_of_another_run_are_refused():
    # a typed-in copy of an earlier run's records: the check draws its seed per check
    metrics = [dict(event="zero1_step", rank=r, step=s, seed=7, params=[0.0], state_bytes=0,
                    state_elems=0) for r in range(2) for s in (1, 2, 3)]
    problems, _ = z1.judge(metrics, seed=8)
    assert problems and "seed 8" in problems[0]


def test_zero1_where_names_parameter_slices():
    model = z1.build_model(0)
    assert z1.where(model, 0, 57) == "0.weight, 0.bias, 2.weight, 2.bias"
    assert z1.where(model, 28, 37) == "0.weight[28:30], 0.bias, 2.weight[0:1]"


# ------------------------------------------------------------------ 04-memory, in the kernel
def test_memory_solution_passes(capsys):
    out = outcome(capsys, mem_ex.check(solution=True, p=10_000_000_000, **EX_ACT), "passed:")
    assert "16 GB GPUs from d = 14, 80 GB GPUs from d = 2" in out


def test_memory_reference_agrees_with_the_library_everywhere():
    for p, d, stage in mem_ex.cases(random.Random(1), n_models=20):
        assert mem_ex.reference_model_state_bytes(p, d, stage) == pytest.approx(
            mem_ex.expected(p, d, stage), rel=1e-12)


def test_memory_grads_not_partitioned_at_stage_2_is_named(capsys):
    def stage2_like_stage1(p, d, stage):
        return 2 * p / (d if stage >= 3 else 1) + 2 * p / (d if stage >= 3 else 1) + \
            12 * p / (d if stage >= 1 else 1)
    out = outcome(capsys, mem_ex.check(stage2_like_stage1, 14, 2, seed=5, **EX_ACT), "wrong:")
    assert ", stage=2) returned" in out
    assert "your stage-2 value matches stage 1: gradients not partitioned" in out


def test_memory_constants_and_the_notebooks_example_fail(capsys):
    example = {(10_000_000_000, d, 3): 16e10 / d for d in (2, 14)}   # the notebook's model
    def typed_in(p, d, stage):
        return example.get((p, d, stage), 16e10 / 14)
    for fn in (lambda p, d, stage: 16e10 / 14, typed_in):
        out = outcome(capsys, mem_ex.check(fn, 14, 2, **EX_ACT), "wrong:")
        assert "returned" in out and "expected" in out


def _memory_cells() -> tuple[str, str]:
    """The skeleton cell (code) and the <details> solution's code block (markdown)."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    found = [c.source for c in nb.cells if "def model_state_bytes(" in c.source]
    assert len(found) == 2, "expected the skeleton cell and the solution's <details>"
    code, solution = found
    return code, solution.split("```python\n")[1].split("```")[0]


def _notebook_space() -> dict:
    return dict(memory=memory, GiB=GiB, EXERCISE_P=10_000_000_000)


def test_memory_unsolved_skeleton_says_not_yet(capsys):
    space = _notebook_space()
    exec(_memory_cells()[0], space)             # the skeleton cell as handed out
    out = outcome(capsys, mem_ex.check(space["model_state_bytes"], space["d_16gb_answer"],
                                       space["d_80gb_answer"], **space["EX_ACT"]), "not yet:")
    assert "NotImplementedError" in out


def test_memory_solution_in_the_notebook_passes(capsys):
    space = _notebook_space()
    skeleton_cell, solution = _memory_cells()
    exec(skeleton_cell, space)
    exec(solution, space)                        # what the <details> shows, typed in
    out = outcome(capsys, mem_ex.check(space["model_state_bytes"], space["d_16gb_answer"],
                                       space["d_80gb_answer"], **space["EX_ACT"]), "passed:")
    assert "from d = 14" in out


def test_memory_right_function_wrong_answer(capsys):
    out = outcome(capsys, mem_ex.check(mem_ex.reference_model_state_bytes, 10, 2, **EX_ACT),
                  "wrong:")
    assert "16 GB GPUs: with d = 10 stage 3 needs" in out and "activations" in out
