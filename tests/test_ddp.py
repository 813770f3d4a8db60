"""Data parallelism: DDP equivalence on 2 gloo ranks, the scaling math, and lab 02 end to end.

Equivalence: after K SGD steps, 2 ranks with per-rank batch b hold the same parameters as one
process with batch 2b, within atol=1e-5 / rtol=1e-4 (float32 summation order differs), and the two
ranks hold bit-identical parameters. A run with no gradient averaging (mode `none`) is checked to
differ, so the comparison can tell the difference.
"""
import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from dltutor.ddp import scaling, timeline
from dltutor.core.course import tagged_lines
from dltutor.ddp.by_hand import param_checksum
from dltutor.launch.run import launch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKER = HERE / "ddp_equiv_worker.py"
LAB = ROOT / "course" / "labs" / "02_ddp" / "train.py"
STEPS, GLOBAL_BATCH = 5, 16
ATOL, RTOL = 1e-5, 1e-4


# ---------------------------------------------------------------- scaling math, hand values
def test_scaled_lr_linear_rule():
    assert scaling.scaled_lr(0.1, 1) == pytest.approx(0.1)
    assert scaling.scaled_lr(0.1, 8) == pytest.approx(0.8)
    assert scaling.scaled_lr(0.1, global_batch=8192, base_batch=256) == pytest.approx(3.2)
    assert scaling.scaled_lr(0.05, global_batch=128, base_batch=256) == pytest.approx(0.025)
    with pytest.raises(ValueError):
        scaling.scaled_lr(0.1, 0)
    with pytest.raises(ValueError):
        scaling.scaled_lr(0.1, global_batch=512)


def test_warmup_factor_and_schedule():
    # 4 warm-up steps from 0: 0.25, 0.5, 0.75, 1, then flat
    assert [scaling.warmup_factor(s, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    # Goyal et al.: from lr to k*lr (k=4 -> start 0.25) over 3 steps
    assert scaling.warmup_schedule(0.4, 5, 3, start_factor=0.25) == pytest.approx(
        [0.2, 0.3, 0.4, 0.4, 0.4])
    assert scaling.warmup_schedule(0.4, 3, 0) == [0.4, 0.4, 0.4]
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = scaling.warmup_scheduler(opt, 2)
    seen = []
    for _ in range(3):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([0.5, 1.0, 1.0])


def test_efficiency_math():
    assert scaling.speedup(180.0, 100.0) == pytest.approx(1.8)
    assert scaling.weak_efficiency(180.0, 100.0, 2) == pytest.approx(0.9)
    assert scaling.weak_efficiency(400.0, 100.0, 4) == pytest.approx(1.0)
    assert scaling.strong_efficiency(100.0, 60.0, 2) == pytest.approx(100 / 120)
    rows = scaling.scaling_table([
        {"world_size": 1, "scaling": "weak", "global_img_per_s": 100.0},
        {"world_size": 2, "scaling": "weak", "global_img_per_s": 150.0},
        {"world_size": 1, "scaling": "strong", "global_img_per_s": 90.0},
        {"world_size": 4, "scaling": "strong", "global_img_per_s": 180.0}])
    got = {(r["scaling"], r["world_size"]): (r["speedup"], r["efficiency"]) for r in rows}
    assert got[("weak", 2)] == pytest.approx((1.5, 0.75))
    assert got[("strong", 4)] == pytest.approx((2.0, 0.5))
    assert got[("weak", 1)] == pytest.approx((1.0, 1.0))


def test_split_and_effective_batch():
    assert scaling.split_batch(4, "weak", per_rank_batch=32) == (32, 128)
    assert scaling.split_batch(4, "strong", global_batch=256) == (64, 256)
    assert scaling.effective_batch(32, 8, accumulation_steps=2) == 512
    with pytest.raises(ValueError, match="evenly"):
        scaling.split_batch(3, "strong", global_batch=256)


def test_lab_marks_its_distributed_lines():
    lines = [text for _, text in tagged_lines(LAB)]
    assert any("DistributedSampler(" in t for t in lines)
    assert any("set_epoch" in t for t in lines)
    assert any("DDP(" in t for t in lines)
    assert any("allreduce_gradients" in t for t in lines)


# ---------------------------------------------------------------- equivalence on 2 gloo ranks
def _worker_module():
    spec = importlib.util.spec_from_file_location("ddp_equiv_worker", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def two_rank_params(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_equiv")
    res = launch(WORKER, nproc=2, args=["--out", str(out), "--steps", str(STEPS),
                                        "--global-batch", str(GLOBAL_BATCH)],
                 threads=1, timeout=120, echo=False, log_dir=out / "logs")
    assert [m["rank"] for m in res.metrics] == [0, 1]
    return {(mode, r): torch.load(out / f"{mode}.rank{r}.pt")
            for mode in ("ddp", "manual", "none") for r in (0, 1)}


@pytest.fixture(scope="module")
def reference_params():
    worker = _worker_module()
    model = worker.train("none", rank=0, world=1, steps=STEPS, global_batch=GLOBAL_BATCH)
    initial = worker.make_model().state_dict()
    return model.state_dict(), initial


@pytest.mark.parametrize("mode", ["ddp", "manual"])
def test_two_ranks_match_one_process_with_double_batch(mode, two_rank_params, reference_params):
    ref, initial = reference_params
    r0, r1 = two_rank_params[(mode, 0)], two_rank_params[(mode, 1)]
    for name in ref:
        assert torch.equal(r0[name], r1[name]), f"{mode}: ranks disagree on {name}"
        assert not torch.equal(ref[name], initial[name]), f"{name} never moved"
        torch.testing.assert_close(r0[name], ref[name], atol=ATOL, rtol=RTOL,
                                   msg=lambda m: f"{mode}, {name}: {m}")


def test_without_gradient_averaging_ranks_drift(two_rank_params, reference_params):
    ref, _ = reference_params
    r0, r1 = two_rank_params[("none", 0)], two_rank_params[("none", 1)]
    drift = max((r0[n] - r1[n]).abs().max().item() for n in ref)
    off = max((r0[n] - ref[n]).abs().max().item() for n in ref)
    assert drift > 100 * ATOL and off > 100 * ATOL, (drift, off)


# ---------------------------------------------------------------- the lab, 2 ranks, end to end
def _check_common(ms, steps):
    assert [m["rank"] for m in ms] == [0, 1] and {m["world_size"] for m in ms} == {2}
    for m in ms:
        assert m["hardware"] in ("CPU/gloo", "GPU/nccl") and m["data"] in ("SYNTHETIC", "Fashion-MNIST", "cifar10")
        assert m["steps"] == steps and len(m["loss_curve"]) == steps == len(m["lr_curve"])
        assert m["img_per_s"] > 0 and m["global_img_per_s"] > 0 and m["step_time_ms"] > 0
        assert all(math.isfinite(v) for v in m["loss_curve"])
    # replicas identical, loss curve is the mean over ranks (same on both)
    assert ms[0]["param_checksum"] == ms[1]["param_checksum"]
    assert ms[0]["loss_curve"] == ms[1]["loss_curve"]


def test_lab_tiny_two_ranks_weak_scaling(tmp_path):
    res = launch(LAB, nproc=2, args=["--tiny", "--weak", "--warmup-steps", "3"], threads=1,
                 timeout=150, echo=False, log_dir=tmp_path)
    ms = res.metrics
    steps = 2 * (256 // (2 * 16))  # 2 epochs of 256 images, 16 per rank, 2 ranks
    _check_common(ms, steps)
    m = ms[0]
    assert (m["scaling"], m["per_rank_batch"], m["global_batch"]) == ("weak", 16, 32)
    assert m["lr"] == pytest.approx(0.2) and m["overlap"] is True  # 0.1 x 2 ranks
    assert m["lr_curve"][:4] == pytest.approx([0.1 + 0.1 / 3, 0.1 + 0.2 / 3, 0.2, 0.2])
    # DistributedSampler: disjoint shards per rank, reshuffled by set_epoch each epoch
    h0, h1 = ms[0]["shard_heads"], ms[1]["shard_heads"]
    assert len(h0) == 2 and not set(h0[0]) & set(h1[0]) and h0[0] != h0[1]


def test_lab_no_overlap_strong_scaling(tmp_path):
    res = launch(LAB, nproc=2, args=["--tiny", "--strong", "--global-batch", "32", "--no-overlap",
                                     "--steps", "4", "--profile-steps", "1", "--profile-dir",
                                     str(tmp_path / "profile")], threads=1, timeout=150, echo=False,
                 log_dir=tmp_path)
    ms = res.metrics
    _check_common(ms, 4)
    m = ms[0]
    assert (m["scaling"], m["per_rank_batch"], m["global_batch"]) == ("strong", 16, 32)
    assert m["overlap"] is False and m["lr"] == pytest.approx(0.1)  # global batch unchanged
    # the profiled last step: one all-reduce, after backward, so nothing overlaps (the control)
    assert len(m["step_times_ms"]) == 1  # 4 steps: 2 warm-up, 1 timed, 1 profiled
    rows = timeline.run_rows("no overlap", res.metric("profile"))
    assert len(rows) == 2 and all(r["buckets"] == 1 for r in rows)
    assert all(r["t_comm_ms"] > 0 and r["t_overlap_ms"] == 0 for r in rows)


def test_lab_runs_as_plain_python(monkeypatch, capsys):
    """`python train.py`: one process, no process group, the LR left unscaled (W = 1)."""
    from dltutor.core.dist import RANK_ENV
    for name in RANK_ENV:  # as if started by plain python, even inside a Slurm job
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # dist.init leaves the thread count alone
    spec = importlib.util.spec_from_file_location("lab02_train", LAB)
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as a launched rank gets: no spinning on a busy machine
    try:
        lab.main(["--tiny", "--steps", "3", "--warmup-epochs", "0.5", "--eval"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("DLTUTOR_METRICS ")]
    assert len(lines) == 1, out
    m = json.loads(lines[0].split(" ", 1)[1])
    assert (m["world_size"], m["launcher"], m["global_batch"]) == (1, "single", 16)
    assert m["steps"] == 3 and m["lr"] == pytest.approx(0.1)
    assert m["warmup_steps"] == 8  # half of 256 // 16 = 16 steps per epoch
    assert 0.0 <= m["test_acc"] <= 1.0
    assert not torch.distributed.is_initialized()


def test_param_checksum_sees_a_change():
    model = torch.nn.Linear(3, 2)
    before = param_checksum(model)
    with torch.no_grad():
        model.weight[0, 0] += 1e-3
    assert param_checksum(model) != before
