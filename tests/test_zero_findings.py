"""Notebook 04's printed findings (dltutor.zero.findings): each sentence follows the numbers, each
way, and the paper verdict at the seed's sizes is pinned (issue #20)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dltutor.core.findings import INCONCLUSIVE
from dltutor.core.units import GiB, MiB
from dltutor.zero import bert_lab, budget, findings, memory, runs

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "course" / "notebooks" / "04_deepspeed_out_of_core_bert.ipynb"
SEED_ACT = dict(s=512, b=1, h=1024, L=192, a=16, k_l=2, k_h=4)   # notebook 04's `act`
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)      # its exercise's


def seed_p() -> int:
    return memory.seed_on_paper()["p"]


# ------------------------------------------------------------------ the paper verdict (section 1)
def test_seed_stage3_on_two_16gib_gpus_fails_on_model_states_alone():
    p = seed_p()
    est = memory.estimate_zero_memory(p, d=2, z=3, **SEED_ACT)
    assert est.model_states > 16 * GiB          # 16 p / 2 = 18.5 GiB before any activation
    assert est.model_states == pytest.approx(16 * p / 2)
    lines = findings.fit_findings(p, 2, [16, 32], **SEED_ACT)
    stage3 = next(s for s in lines if s.startswith("stage 3, d=2"))
    assert "the model states alone already exceed" in stage3
    assert "activations push" not in stage3


def test_seed_stage3_needs_more_ranks_with_activations_than_model_states_alone():
    p = seed_p()
    with_a = memory.smallest_fitting_d(p, 16 * GiB, z=3, **SEED_ACT)
    without = memory.smallest_fitting_d(p, 16 * GiB, z=3, k_l=2, k_h=4)
    assert with_a > without
    line = next(s for s in findings.fit_findings(p, 2, [16, 32], **SEED_ACT) if s.startswith("16 GiB"))
    assert f"from d={with_a} counting the activations" in line
    assert f"from d={without} counting the model states alone" in line
    assert "no stage fits" in line


def test_stage_fit_names_the_part_that_is_too_big_each_way():
    dev = 16 * GiB
    def est(states, act):
        return memory.MemoryEstimate(M_m=states, M_o=0.0, M_g=0.0, M_a=act, stage=3, d=4)
    assert "fits (" in findings.stage_fit(est(8 * GiB, 4 * GiB), dev)
    assert "model states alone already exceed" in findings.stage_fit(est(17 * GiB, 1 * GiB), dev)
    assert "activations push the total over" in findings.stage_fit(est(10 * GiB, 8 * GiB), dev)
    assert "activations alone already exceed" in findings.stage_fit(est(1 * GiB, 17 * GiB), dev)


def test_fit_findings_say_when_activations_do_not_change_the_answer():
    p = seed_p()
    line = next(s for s in findings.fit_findings(p, 2, [32], **SEED_ACT) if s.startswith("32 GiB"))
    assert "stage 1 is the lowest that fits" in line and "do not change the answer" in line
    huge = dict(SEED_ACT, L=192 * 40)           # activations alone bigger than the device
    line = findings.fit_findings(p, 2, [16], per_stage=False, **huge)[0]
    assert "fits at no d: the activations alone" in line


def test_exercise_solution_matches_the_code():
    p = 10_000_000_000
    assert memory.smallest_fitting_d(p, 16 * GiB, z=3, **EX_ACT) == 14
    assert memory.smallest_fitting_d(p, 80 * GiB, z=3, **EX_ACT) == 2
    assert memory.smallest_fitting_d(p, 16 * GiB, z=3, k_l=2, k_h=4) == 10
    solution = next(c for c in _cells("markdown") if "<summary><b>Solution" in c)
    assert "**d = 14**" in solution and "**d = 2**" in solution and "10 and 2" in solution


# ------------------------------------------------------------------ M_g: k_l or k_h
def test_gradient_bytes_follow_k_g_and_agree_in_fp32():
    p = 1000
    assert memory.estimate_zero_memory(p, k_l=2, k_h=4).M_g == 2 * p        # default: k_l
    assert memory.estimate_zero_memory(p, k_l=2, k_h=4, k_g=4).M_g == 4 * p
    assert memory.estimate_zero_memory(p, k_l=2, k_h=4, k_g=4, d=4, z=2).M_g == p
    fp32 = [memory.estimate_zero_memory(p, k_l=4, k_h=4, k_g=k).M_g for k in (None, 4)]
    assert fp32[0] == fp32[1]


# ------------------------------------------------------------------ measured rows
def _row(config, measured, predicted, sps=None, spread=None, **kw):
    return dict(config=config, label=runs.LABELS.get(config, config), measured=measured,
                predicted=predicted, ratio=measured / predicted, samples_per_s=sps,
                samples_per_s_spread=spread, **kw)


def test_ratio_findings_sort_each_config_by_its_own_ratio():
    rows = [_row("zero0", 102, 100), _row("zero3", 130, 100), _row("zero1", 70, 100)]
    text = " ".join(findings.ratio_findings(rows))
    assert "within 10 % of the formula (a tolerance, not an interval: the counts are exact): stage 0 (1.02)" in text
    assert "above it (more held than the formula): stage 3 (1.30)" in text
    assert "below it (less held than the formula): stage 1 (0.70)" in text
    flipped = [_row("zero0", 140, 100), _row("zero3", 99, 100)]
    text = " ".join(findings.ratio_findings(flipped))
    assert "the counts are exact): stage 3 (0.99)" in text and "above it" in text and "stage 0 (1.40)" in text
    assert "below it" not in text


def test_ratio_findings_compare_cpu_offload_with_stage3():
    same = [_row("zero3", 100, 100), _row("zero3_offload_cpu", 101, 100)]
    assert "unchanged within 5 %" in findings.ratio_findings(same)[-1]
    less = [_row("zero3", 100, 100), _row("zero3_offload_cpu", 40, 100)]
    assert "holds less" in findings.ratio_findings(less)[-1]


def test_speed_findings_each_way_and_inconclusive():
    base = _row("zero0", 1, 1, sps=10.0, spread=0.5)
    slower = findings.speed_findings([base, _row("zero3", 1, 1, sps=5.0, spread=0.5)])[0]
    assert "stage 3 is 0.50x stage 0" in slower
    faster = findings.speed_findings([base, _row("zero3", 1, 1, sps=20.0, spread=0.5)])[0]
    assert "stage 3 is 2.00x stage 0" in faster
    noisy = findings.speed_findings([base, _row("zero3", 1, 1, sps=9.0, spread=2.0)])[0]
    assert INCONCLUSIVE in noisy
    single = findings.speed_findings([base, _row("zero3", 1, 1, sps=5.0, spread=None)])[0]
    assert INCONCLUSIVE in single and "x stage 0" not in single    # one step decides nothing


def test_fsdp_findings_agree_or_differ_by_the_losses():
    z0 = _row("zero0", 100, 100, losses=[6.0, 5.5, 5.0], ranks=2, params=1000)
    same = _row("fsdp2", 50, 50, losses=[6.0, 5.5000001, 5.0], ranks=2, params=1000)
    assert "they agree" in findings.fsdp_findings(same, z0)[0]
    off = _row("fsdp2", 50, 50, losses=[6.0, 5.6, 5.0], ranks=2, params=1000)
    assert "they differ beyond round-off" in findings.fsdp_findings(off, z0)[0]
    per = findings.fsdp_findings(same, z0)[-1]
    assert f"{50 * MiB * 2 / 1000:.1f} bytes per parameter" in per


_ADAM_INIT = """OUT OF MEMORY during iteration 0 (Adam step): RuntimeError: DefaultCPUAllocator: can't \
allocate memory: you tried to allocate 409600 bytes. [held 1320 MiB, start-up 1000 MiB, limit 1320 MiB]
Traceback (most recent call last):
  File "/x/course/labs/04_deepspeed/train_bert.py", line 64, in main
    loss, _ = train_step(net, opt, tokens, labels, loss_fn=None, autocast=amp,
              ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/x/torch/optim/adam.py", line 238, in step
    has_complex = self._init_group(
  File "/x/torch/optim/adam.py", line 182, in _init_group
    state["exp_avg_sq"] = torch.zeros_like(
                          ^^^^^^^^^^^^^^^^^
RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory
"""
_BACKWARD = """OUT OF MEMORY during iteration 0 (backward): RuntimeError: DefaultCPUAllocator: can't \
allocate memory: you tried to allocate 78643200 bytes. [held 1290 MiB, start-up 1000 MiB, limit 1320 MiB]
Traceback (most recent call last):
  File "/x/course/labs/04_deepspeed/train_bert.py", line 64, in main
    loss, _ = train_step(net, opt, tokens, labels, loss_fn=None, autocast=amp,
  File "/x/dltutor/core/train_step.py", line 30, in train_step
    loss.backward()
  File "/x/torch/_tensor.py", line 626, in backward
    torch.autograd.backward(
  File "/x/torch/autograd/graph.py", line 823, in _engine_run_backward
    return Variable._execution_engine.run_backward(  # Calls into the C++ engine
RuntimeError: [enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory
"""


def _oom(log: str) -> dict:
    return dict(oom=True, lines=runs.allocator_lines(log), frames=runs.traceback_frames(log))


def test_traceback_frames_read_the_last_traceback_innermost_last():
    frames = runs.traceback_frames("Traceback (most recent call last):\n  File \"/a.py\", line 1, "
                                   "in old\n    x()\nE\n" + _ADAM_INIT)
    assert [f["func"] for f in frames] == ["main", "step", "_init_group"]
    assert frames[-1]["code"] == 'state["exp_avg_sq"] = torch.zeros_like('
    assert frames[1]["code"] == "has_complex = self._init_group("
    assert frames[0]["line"] == 64 and frames[0]["file"].endswith("train_bert.py")
    assert runs.traceback_frames("no traceback here") == []


def test_budget_findings_say_where_the_plain_run_died_from_its_traceback():
    p = 19 * MiB                                   # 16 p = 304 MiB, 8 p = 152 MiB
    init = findings.budget_findings(_oom(_ADAM_INIT), p, 320)
    assert "16 p = 304 MiB of model states vs a 320 MiB budget: 16 MiB left" in init[0]
    assert "creation of Adam's state" in init[1] and "adam.py:182 in _init_group" in init[1]
    assert "'iteration 0 (Adam step)'" in init[1]
    assert "did not all exist yet" in init[2] and "filled the 320 MiB" in init[2]
    assert "not model states" not in init[2]
    assert "0.39 MiB (409,600 bytes), a small one: the budget was already full" in init[3]
    back = findings.budget_findings(_oom(_BACKWARD), p, 320)
    assert "It died in backward: graph.py:823 in _engine_run_backward" in back[1]
    # iteration 0, backward: at most weights + gradients (8 p = 152 MiB) of the 290 MiB held
    assert "at most 152 MiB of the 290 MiB it held, so at least 138 MiB were not model states" \
        in back[2] and "activations" in back[2]
    assert "did not all exist yet" not in back[2]
    assert "75.00 MiB" not in back[3] and "75 MiB (78,643,200 bytes), a large one" in back[3]
    later = _BACKWARD.replace("iteration 0 (backward)", "iteration 2 (backward)")
    assert "at most 304 MiB of the 290 MiB" not in findings.budget_findings(_oom(later), p, 320)[2]
    assert "they alone can explain" in findings.budget_findings(_oom(later), p, 320)[2]


def test_died_in_names_the_innermost_known_frame():
    def fr(file, func):
        return dict(file=file, line=1, func=func, code="")
    fwd = [fr("/l/train_step.py", "train_step"), fr("/t/nn/modules/module.py", "_call_impl"),
           fr("/t/nn/modules/linear.py", "forward"), fr("/t/nn/functional.py", "gelu")]
    assert findings.died_in(fwd)[0] == "forward"
    step = [fr("/t/optim/optimizer.py", "wrapper"), fr("/t/optim/adam.py", "_single_tensor_adam")]
    assert findings.died_in(step)[0] == "optimizer_step"
    assert findings.died_in([fr("/l/train_bert.py", "main")]) == (None, None)
    text = findings.budget_findings(dict(oom=True, lines=[], frames=[]), 19 * MiB, 320)
    assert "cannot say which part of the step ran out" in text[2]


def test_budget_findings_without_an_oom():
    over = findings.budget_findings(dict(oom=False), 30 * MiB // 16, 20)
    assert "over it by 10 MiB" in over[0] and "did not run out of memory" in over[1]


_NVME_SIZES = dict(dtype="fp32", num_layers=2, h_dim=320, ff_dim=1024, num_heads=8, vocab=512,
                   seq_len=16)


def test_nvme_summary_splits_ram_by_the_models_tensors_and_prints_the_labs_line(tmp_path, monkeypatch):
    from types import SimpleNamespace
    from dltutor.zero import swap_buffers
    numels = swap_buffers.param_numels({k: v for k, v in _NVME_SIZES.items() if k != "dtype"})
    small = sum(n for n in numels if n * 4 < MiB) * 4 / MiB
    row = dict(ranks=1, dtype="fp32", params_MiB=small + 1.25, grads_MiB=10.0, optimizer_MiB=0.0)
    line = ("NVMe offload: swap buffers sized to fit the locked-memory limit of 8 MiB (ulimit -l): "
            "1 parameter buffer(s), optimizer sub-groups of 327,680 elements, 7.5 MiB locked")
    log = tmp_path / "rank0.log"
    log.write_text("[rank0] hello\n" + line + "\nDLTUTOR_METRICS {}\n")
    out = runs.nvme_summary(row, SimpleNamespace(logs={0: str(log)}), _NVME_SIZES)
    assert out[0] == "the lab's line: " + line
    assert f"{small:.1f} MiB, which DeepSpeed never swaps, and 1.25 MiB of parameters in swap " \
           "buffers (1 buffer(s) of 1.25 MiB" in out[1]
    assert "grads" not in out[1] and "gradients 10 MiB" in out[1]
    groups = swap_buffers.sub_groups(numels, 327_680)
    assert f"{len(groups)} optimizer sub-group(s)" in out[2]
    # no line: the buffers kept their fast sizes, and the kernel's limit is what it says
    log.write_text("DLTUTOR_METRICS {}\n")
    monkeypatch.setattr(swap_buffers, "locked_limit", lambda: (8 * MiB, 8 * MiB))
    out = runs.nvme_summary(row, SimpleNamespace(logs={0: str(log)}), _NVME_SIZES)
    assert "printed no 'NVMe offload:' line" in out[0] and "ulimit -l`, which the ranks " \
        "inherit: 8 MiB" in out[0]
    assert f"({swap_buffers.FAST_PARAM_BUFFERS} buffer(s) of 1.25 MiB" in out[1]
    assert f"{len(swap_buffers.sub_groups(numels, max(numels)))} optimizer sub-group(s)" in out[2]
    tiny = dict(_NVME_SIZES, h_dim=64, ff_dim=128)          # every sub-group under 1 MiB
    out = runs.nvme_summary(row, SimpleNamespace(logs={0: str(log)}), tiny)
    assert "under one I/O block" in out[2] and "stay in RAM" in out[2]


def test_usage_note_reports_what_the_process_held(monkeypatch):
    monkeypatch.setattr(budget, "APPLIED", {})
    assert budget.usage_note() == ""
    start = budget.data_segment_bytes()
    monkeypatch.setattr(budget, "APPLIED", dict(start=start, limit=start + 320 * MiB, dev="cpu"))
    note = budget.usage_note()
    assert f"start-up {start / MiB:.0f} MiB" in note and f"limit {(start + 320 * MiB) / MiB:.0f}" in note
    assert note in bert_lab.oom_line("iteration 0", MemoryError("out of memory"))


def test_rate_spread_is_the_95_ci_of_the_steady_per_step_rates():
    """Issue #42: the ± of samples/s is the 95 % CI of the mean per-step rate, the first timed step
    (it also runs the memory meter) left out; not half the range: more steps shrink it."""
    import math

    from dltutor.core.findings import half_range
    from dltutor.core.spread import mean_ci
    # 4 samples per step; the meter step takes 5 s, then steps of 1 s and 2 s: rates 4 and 2
    steps = [5.0, 1.0, 2.0]
    mean, ci = runs.rate_spread(12 / 8, steps)
    assert mean == pytest.approx(3.0) and ci == pytest.approx(mean_ci([4.0, 2.0]))
    assert ci != pytest.approx(half_range([4.0, 2.0]))
    more = runs.rate_spread(4 * 9 / 20, [5.0] + [1.0, 2.0] * 5)[1]
    assert more < ci / 5
    lone = runs.rate_spread(8 / 6, [5.0, 1.0])       # one steady step: no interval, never ± 0
    assert lone[0] == pytest.approx(4.0) and math.isnan(lone[1])
    assert runs.rate_spread(None, [1.0, 2.0]) == (None, pytest.approx(math.nan, nan_ok=True))
    row = runs.row_of(dict(samples_per_s=4.0, step_s=[1.0, 1.0, 1.0]), "zero0", 2)
    assert row["samples_per_s_spread"] == 0.0 and row["samples_per_s_lab"] == 4.0
    said = findings.speed_findings([_row("zero0", 1, 1, sps=10.0, spread=math.nan),
                                    _row("zero3", 1, 1, sps=1.0, spread=0.1)])
    assert INCONCLUSIVE in said[0] and "no interval" in said[0]


# ------------------------------------------------------------------ the notebook prints them
def _cells(kind: str) -> list[str]:
    nb = json.loads(NB.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def test_notebook_04_prints_its_findings_and_no_longer_states_them():
    code = "\n".join(_cells("code"))
    for name in ("fit_findings", "budget_findings", "ratio_findings", "speed_findings",
                 "fsdp_findings"):
        assert f"findings.{name}(" in code, f"notebook 04 does not print findings.{name}"
    md = "\n".join(_cells("markdown"))
    for stated in ("even stage 3 does not fit 16 GB because", "On a 32 GB GPU stage 1\nalready fits",
                   "stages 0–2\nshould sit near 1", "so expect\nstage 3", "The losses lie on top",
                   "Measured model-state bytes match the formula per stage"):
        assert stated not in md, f"notebook 04 still states a result in prose: {stated!r}"
    assert "Zero Redundancy Optimizer" in md and "k_g=4" in md and "16k_l + 2" in md


def test_swap_files_are_split_by_what_deepspeed_wrote_into_them(tmp_path):
    from dltutor.zero import runs as zruns
    files = []
    for name, size in (("7_gradient_0_10.tensor.swp", 2 * 2**20), ("3_param.tensor.swp", 2**20),
                       ("optimizer_0_exp_avg.tensor.swp", 2**20)):
        (tmp_path / name).write_bytes(b"\0" * size)
        files.append(tmp_path / name)
    assert zruns.swap_kinds(files) == ("1 of them (2 MiB) fp32 gradients of swapped parameters, "
                                       "2 parameters and Adam's state")


def test_notebook_04_says_what_pm_is_and_the_speed_plot_draws_it():
    import math

    import matplotlib
    matplotlib.use("Agg")
    from dltutor.zero import plots
    code, md = " ".join(_cells("code")), " ".join(" ".join(s.split()) for s in _cells("markdown"))
    assert "print(SPREAD_NOTE)" in code and "half the range" not in md
    assert "95 % confidence interval" in md
    rows = [dict(_row("zero0", 1, 1, sps=10.0, spread=1.0), ranks=2),
            dict(_row("zero3", 1, 1, sps=5.0, spread=math.nan), ranks=2)]
    ax = plots.plot_samples_per_s(rows).axes[0]
    from matplotlib.container import ErrorbarContainer
    assert any(isinstance(c, ErrorbarContainer) for c in ax.containers) and "95 % CI" in ax.get_xlabel()
