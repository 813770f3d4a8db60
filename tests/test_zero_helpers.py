"""Notebook 04's helpers without launching anything: DeepSpeed log parsing, result rows, plots,
the budget module's error recognition and the sweep lab's config check."""
import io
import runpy
import sys
from contextlib import redirect_stderr
from pathlib import Path

import matplotlib
import pytest

from dltutor.core.units import GiB
from dltutor.zero import bert_lab
from dltutor.zero import budget
from dltutor.zero import memory
from dltutor.zero import plots
from dltutor.zero import runs

matplotlib.use("Agg")
LAB = Path(__file__).resolve().parents[1] / "course" / "labs" / "04_deepspeed"

SEED_LIKE_LOG = "\n".join([
    "[2026-01-01 10:00:00,1] [INFO] [logging.py:128:log_dist] [Rank 0] step=1, skipped=0, "
    "lr=[0.0001], mom=[(0.9, 0.999)]",
    "[INFO] [loss_scaler.py:190:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
    "Attempted loss scale: 65536, reducing to 32768",
    "[Rank 0] step=2, skipped=1, lr=[0.0001], mom=[(0.9, 0.999)]",
    "[INFO] [timer.py:264:stop] epoch=0/micro_step=2/global_step=2, RunningAvgSamplesPerSec=1.9, "
    "CurrSamplesPerSec=2.0, MemAllocated=10.3GB, MaxMemAllocated=13.8GB",
    "a line with step=7 but nothing DeepSpeed prints",
    "[Rank 0] step=1, skipped=0, lr=[0.001], mom=[(0.9, 0.999)]"])


def test_parse_deepspeed_log_merges_steps_marks_overflow_and_splits_runs():
    rows = bert_lab.parse_deepspeed_log(SEED_LIKE_LOG)
    assert [(r["run"], r["step"]) for r in rows] == [(0, 1), (0, 2), (1, 1)]
    first, second, again = rows
    assert "overflow" not in first and first["lr"] == 1e-4
    assert second["overflow"] is True and second["loss_scale"] == 32768 and second["skipped"] == 1
    assert second["RunningAvgSamplesPerSec"] == 1.9 and second["MaxMemAllocated"] == 13.8
    assert again["lr"] == 1e-3


def _metrics(stage, total, pred, sps, offload="none"):
    return dict(rank=0, stage=stage, offload=offload, dtype="fp32", params=1000,
                model_state_bytes=dict(params=total // 4, grads=total // 4, optimizer=total // 2,
                                       total=total),
                predicted=dict(model_states=pred), samples_per_s=sps, VmHWM=3 * 2**20,
                losses=[1.0], budget_bytes=None)


def test_rows_ratios_and_oom_lines():
    rows = [runs.row_of(_metrics(0, 16 * 2**20, 16 * 2**20, 10.0), "zero0", 2),
            runs.row_of(_metrics(3, 11 * 2**20, 10 * 2**20, 4.0), "zero3", 2)]
    runs.with_speed_ratio(rows)
    z3 = rows[1]
    assert z3["label"] == "stage 3" and z3["params"] == 1000 and z3["measured"] == 11
    assert z3["ratio"] == pytest.approx(1.1) and z3["speed_vs_stage0"] == pytest.approx(0.4)
    assert z3["memory_vs_stage0"] == pytest.approx(11 / 16) and z3["peak_rss"] == 3
    log = ("loading\nOUT OF MEMORY during iteration 0 (Adam step): RuntimeError: x\n"
           "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8\n"
           "ok\n")
    assert len(runs.allocator_lines(log)) == 2
    assert budget.is_out_of_memory("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not budget.is_out_of_memory("loss 3.2, all good")


def test_plots_show_every_term_the_capacity_and_honest_labels(monkeypatch):
    monkeypatch.setenv("DLTUTOR_FAST", "1")
    est = memory.estimate_all_stages(10**9, d=4, k_l=2, k_h=4, s=128, b=1, h=1024, L=4, a=16)
    fig = plots.plot_memory_stack(est, device_bytes=8 * GiB)
    ax = fig.axes[0]
    assert len(ax.containers) == 4 and all(len(c) == 4 for c in ax.containers)  # terms x stages
    stage0_total = sum(c[0].get_height() for c in ax.containers)
    assert stage0_total == pytest.approx(est[0].total / GiB)
    assert any(ln.get_ydata()[0] == 8 for ln in ax.get_lines())       # the capacity line
    assert "on paper" in ax.get_title()
    rows = [dict(label="stage 0", ranks=2, predicted=16.0, measured=16.0, ratio=1.0,
                 params_MiB=4.0, grads_MiB=4.0, optimizer_MiB=8.0, samples_per_s=10.0,
                 speed_vs_stage0=1.0)]
    title = plots.plot_predicted_vs_measured(rows, budget_mib=20).axes[0].get_title()
    assert "CPU/gloo" in title or "GPU/nccl" in title
    assert "fast mode" in title
    assert "fast mode" in plots.plot_samples_per_s(rows).axes[0].get_title()


def test_sweep_lab_rejects_an_unknown_config_before_starting():
    err = io.StringIO()
    old = sys.argv
    sys.argv = [str(LAB / "sweep_zero.py"), "--tiny", "--configs", "zero0,nope"]
    try:
        with redirect_stderr(err), pytest.raises(SystemExit) as exc:
            runpy.run_path(str(LAB / "sweep_zero.py"), run_name="__main__")
    finally:
        sys.argv = old
    assert exc.value.code == 2 and "unknown ['nope']" in err.getvalue() and "zero3" in err.getvalue()


def test_budget_rows_put_the_plain_run_first_with_its_formula():
    from dltutor.zero import runs
    z3 = dict(ranks=2, params=1 << 20, predicted=9.6, measured=10.2)
    rows = runs.budget_rows({"oom": True}, [("ZeRO-3, 2 ranks", z3)])
    assert rows[0] == dict(run="plain PyTorch, 1 process", ranks=1, result="OUT OF MEMORY",
                           formula_MiB=16, held_MiB="-")
    assert rows[1] == dict(run="ZeRO-3, 2 ranks", ranks=2, result="trained", formula_MiB=10, held_MiB=10)


def test_stale_deepspeed_shm_is_cleared_and_live_buffers_kept(tmp_path):
    import mmap
    from dltutor.core.engines import SHM_PREFIX, clear_stale_deepspeed_shm
    stale, live, other = (tmp_path / f"{SHM_PREFIX}0_127.0.0.1_29500_{r}" for r in (0, 1)), None, None
    stale = list(stale)
    for f in stale:
        f.write_bytes(b"\0" * 4096)
    live = stale.pop()                      # this process maps it: a running job's buffer
    other = tmp_path / "not_deepspeed"
    other.write_bytes(b"x")
    with open(live, "r+b") as fh, mmap.mmap(fh.fileno(), 4096):
        assert clear_stale_deepspeed_shm(str(tmp_path)) == [stale[0].name]
        assert live.exists() and other.exists() and not stale[0].exists()
