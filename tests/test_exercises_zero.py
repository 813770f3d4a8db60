"""Notebook 04's exercises: ZeRO-1 by hand on 2 gloo ranks (04-zero1), the memory formula as a
function (04-memory).

ZeRO-1: the hidden solution passes; the notebook's skeleton gets "not yet"; the two models of a
check differ in size and never split evenly; the judge's pieces (records of another run refused,
padding told from an overlap, parameter slices named). The wrong and right answers of both
exercises are judged in tests/test_mutations_zero.py. The memory function's tests run in the
kernel only (no launch).
"""
from __future__ import annotations

import random
from pathlib import Path

import nbformat
import pytest
import torch

from dltutor.core.units import GiB
from dltutor.zero import memory
from dltutor.zero import exercise_memory as mem_ex
from dltutor.zero import exercise_zero1 as z1
from dltutor.zero import exercise_zero1_judge as z1_judge

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "course" / "notebooks" / "04_deepspeed_out_of_core_bert.ipynb"
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


def outcome(capsys, ok: bool, head: str) -> str:
    out = capsys.readouterr().out
    assert ok is (head == "passed:"), out
    assert out.startswith(head), out
    return out


# ------------------------------------------------------------------ 04-zero1, on 2 ranks
# The named wrong answers (no all-gather, full Adam state, gradients summed or not all-reduced,
# shards with a gap or an overlap, stale shards, typed-in bounds, a fabricated report) are in
# tests/answers/04-zero1, judged by tests/test_mutations_zero.py.
@slow
def test_zero1_solution_passes(capsys):
    out = outcome(capsys, z1.check(solution=True, seed=3), "passed:")
    assert "two models (57 and 75 parameters" in out                  # seeds 3 and 4
    assert "match one process's torch.optim.Adam after each of 3 steps on every rank" in out
    assert "(51 % and 49 % of one process's)" in out and "cover every element once" in out


@slow
def test_zero1_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    script = skeleton(tmp_path / "zero1_by_hand.py")
    out = outcome(capsys, z1.check(script), "not yet:")
    assert "NotImplementedError" in out


def test_zero1_models_of_one_check_differ_and_split_unevenly():
    for seed in range(1, 7):
        sizes = [z1.flat(z1.build_model(s)).numel() for s in z1.run_seeds(seed)]
        assert sizes[0] != sizes[1] and all(n % z1.NPROC for n in sizes), (seed, sizes)


def test_zero1_records_of_another_run_are_refused():
    # a typed-in copy of an earlier run's records: the check draws its seed per check
    metrics = [dict(event="zero1_step", rank=r, step=s, seed=seed, params=[0.0], state_bytes=0,
                    state_elems=0) for r in range(2) for s in (1, 2, 3) for seed in (7, 8)]
    problems, _ = z1.judge(metrics, seed=8)
    assert problems and "seeds 8 and 9" in problems[0]


def test_zero1_padded_state_is_a_shard_an_overlap_is_not():
    """exp_avg is located in one process's: zeros past the end are padding, not an overlap."""
    seed = 3
    _, _, ref = z1_judge.reference(seed)
    n = ref.numel()
    assert z1_judge._locate(torch.cat([ref[29:], torch.zeros(1, dtype=ref.dtype)]), ref) == (29, n)
    reports = [[{"exp_avg": [ref[:29].tolist()]}], [{"exp_avg": [ref[28:].tolist()]}]]
    out = z1_judge._coverage_problems(reports, seed, params_right=True)
    assert out and "overlap" in out[0] and "(flat 28:29)" in out[0], out


def test_zero1_where_names_parameter_slices():
    model = z1.build_model(3)                       # hidden width 6: 57 parameters
    assert z1_judge.where(model, 0, 57) == "0.weight, 0.bias, 2.weight, 2.bias"
    assert z1_judge.where(model, 28, 37) == "0.weight[28:30], 0.bias, 2.weight[0:1]"


# ------------------------------------------------------------------ 04-memory, in the kernel
def test_memory_solution_passes(capsys):
    out = outcome(capsys, mem_ex.check(solution=True, p=10_000_000_000, **EX_ACT), "passed:")
    assert "16 GiB GPUs from d = 14, 80 GiB GPUs from d = 2" in out


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
        assert "returned" in out and "too " in out and "12" in out


def test_memory_wrong_function_is_not_told_the_expected_bytes(capsys):
    """A wrong value names the rule it breaks, never the bytes (nor the terms) it should be."""
    def double_optimizer(p, d, stage):
        return mem_ex.reference_model_state_bytes(p, d, stage) + 12 * p / (d if stage else 1)
    out = outcome(capsys, mem_ex.check(double_optimizer, 14, 2, seed=3, **EX_ACT), "wrong:")
    p, d, stage = mem_ex.cases(random.Random(3))[0]
    m, g, o = mem_ex._split(p, d, stage)
    for value in (mem_ex.expected(p, d, stage), m, g, o):
        assert f"{value:,.2f}" not in out and f"{value:,.0f}" not in out, out
    assert "expected" not in out and "pass" not in out


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
    assert "16 GiB GPUs: with d = 10 stage 3 needs" in out and "activations" in out


def test_memory_a_larger_d_that_fits_does_not_give_the_smallest_away(capsys):
    out = outcome(capsys, mem_ex.check(mem_ex.reference_model_state_bytes, 15, 2, **EX_ACT),
                  "wrong:")
    assert "d = 15 fits" in out and "a smaller d also fits" in out
    assert "14" not in out.split("d = 15 fits")[1], out


def test_memory_accepted_range_is_real_to_padded_never_floor_division():
    p, d = 1007, 10                                  # p / d = 100.7: a rank holds 100.7 .. 101
    lo, hi = mem_ex.accepted(p, d, 3)
    assert (lo, hi) == (201 + 201 + 1208, 16 * 101)  # each term rounded down .. ceil(p / d) each
    assert lo <= mem_ex.reference_model_state_bytes(p, d, 3) <= hi
    assert 16 * (p // d) < lo                        # p // d drops the remainder
    assert mem_ex.accepted(p, 1, 2) == (16 * p, 16 * p)   # nothing to round on one rank


def test_memory_cases_leave_a_remainder_that_shows():
    for seed in range(20):
        for p, d, stage in mem_ex.cases(random.Random(seed)):
            assert d == 1 or 2 * (p % d) >= d, (p, d)   # p // d loses >= 6 bytes of Adam
    assert len(mem_ex.cases(random.Random(0))) == mem_ex.N_CASES
    assert min(p for p, _, _ in mem_ex.cases(random.Random(0))) < 10**4   # a small model too
