"""What changes on a GPU node, exercised on the CPU: precision from the compute capability (BERT
labs, DeepSpeed config), the GPU memory cap of notebook 04, rank counts from the GPUs, Horovod's
launch flags and the doctor's Horovod row. GPUs are pretended (dltutor.core.gpu_dryrun) or the
CUDA calls are mocked; what only a GPU can show is `make gpu-check`'s job."""
from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys
from types import SimpleNamespace
from unittest import mock

import nbformat
import pytest
import torch

from dltutor.core import device
from dltutor.core.course import course_root, lab
from dltutor.core.gpu_dryrun import nccl_dry_run
from dltutor.zero import bert_lab, budget


# ---------------------------------------------------------------- precision (item 1)
@pytest.mark.parametrize("cap, want", [(None, "fp32"), ((7, 0), "fp16"), ((7, 5), "fp16"),
                                       ((8, 0), "bf16"), ((9, 0), "bf16")])
def test_precision_is_a_function_of_the_compute_capability(cap, want):
    assert device.gpu_precision(cap) == want


def _args(dtype="auto"):
    p = bert_lab.parser("t", deepspeed=False)
    return bert_lab.parse(p, ["--tiny", "--dtype", dtype])


@pytest.mark.parametrize("cap, want", [((7, 0), "fp16"), ((8, 0), "bf16")])
def test_bert_labs_choose_mixed_precision_from_the_gpu_and_deepspeed_follows(cap, want):
    cfg_path = lab("04_deepspeed/configs/zero3.json")
    with nccl_dry_run(world_size=2, rank=0, capability=cap, fake=False):
        dev = device.device()
        args = _args()
        assert bert_lab.resolve_dtype(args) == want
        amp, scaler = bert_lab.mixed_precision(_args(), dev)
        cfg = bert_lab.load_ds_config(cfg_path, _args())
    assert amp is not None and scaler.is_enabled() == (want == "fp16")  # loss scaling: fp16 only
    assert cfg["fp16"]["enabled"] == (want == "fp16") and cfg["bf16"]["enabled"] == (want == "bf16")


def test_on_the_cpu_the_bert_labs_stay_fp32():
    args = _args()
    assert bert_lab.resolve_dtype(args) == "fp32"
    amp, scaler = bert_lab.mixed_precision(_args(), torch.device("cpu"))
    assert amp is None and not scaler.is_enabled()
    cfg = bert_lab.load_ds_config(lab("04_deepspeed/configs/zero0.json"), _args())
    assert not cfg["fp16"]["enabled"] and not cfg["bf16"]["enabled"]


def test_plain_bert_fp16_keeps_fp32_masters_and_checkpoints_the_scaler(tmp_path, capsys):
    """The real lab, one process, --dtype fp16 (CPU autocast): the GPU code path of a V100."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_bert", lab("04_deepspeed/train_bert.py"))
    train_bert = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_bert)
    train_bert.main(["--tiny", "--dtype", "fp16", "--num_iterations", "2",
                     "--checkpoint_dir", str(tmp_path)])
    out = capsys.readouterr().out
    metrics = json.loads(out.split("DLTUTOR_METRICS", 1)[1].strip().splitlines()[0])
    assert metrics["dtype"] == "fp16" and metrics["loss_scale"] > 0
    ck = torch.load(tmp_path / "plain.pt", weights_only=False)
    assert ck["scaler"]["scale"] == metrics["loss_scale"] and "_growth_tracker" in ck["scaler"]
    assert all(t.dtype == torch.float32 for t in ck["model"].values() if t.is_floating_point())
    assert metrics["predicted"]["model_states"] == 16 * metrics["params"]   # 2+2+12 bytes/param


# ---------------------------------------------------------------- the memory cap (item 2)
def _cuda_mocks(reserved=100 * 2**20, total=1000 * 2**20):
    props = SimpleNamespace(total_memory=total)
    return {"synchronize": mock.Mock(), "empty_cache": mock.Mock(),
            "memory_reserved": mock.Mock(return_value=reserved),
            "get_device_properties": mock.Mock(return_value=props),
            "set_per_process_memory_fraction": mock.Mock()}


def test_on_a_gpu_the_budget_caps_the_device_not_the_host():
    mocks, dev = _cuda_mocks(), torch.device("cuda", 0)
    with mock.patch.multiple(torch.cuda, **mocks), mock.patch.object(budget.resource,
                                                                     "setrlimit") as rlimit:
        limit = budget.apply_budget(320, warm=False, dev=dev)
    mocks["set_per_process_memory_fraction"].assert_called_once()
    fraction, on = mocks["set_per_process_memory_fraction"].call_args.args
    assert on == dev and fraction == pytest.approx((100 + 320) / 1000)
    assert limit == pytest.approx(420 * 2**20, rel=1e-9) and not rlimit.called
    assert "set_per_process_memory_fraction" in budget.cap_kind(dev)


def test_on_the_cpu_the_budget_is_rlimit_data_and_too_big_a_gpu_budget_is_refused():
    mocks = _cuda_mocks()
    with mock.patch.multiple(torch.cuda, **mocks), mock.patch.object(budget.resource,
                                                                     "setrlimit") as rlimit:
        budget.apply_budget(64, warm=False, dev=torch.device("cpu"))
        with pytest.raises(ValueError, match="smaller budget"):
            budget.apply_budget(2000, warm=False, dev=torch.device("cuda", 0))
    assert rlimit.call_args.args[0] == budget.resource.RLIMIT_DATA
    assert not mocks["set_per_process_memory_fraction"].called
    assert "RLIMIT_DATA" in budget.cap_kind("cpu")


# ---------------------------------------------------------------- rank counts (item 4)
@pytest.mark.parametrize("gpus, ranks, on_gpu", [(4, [1, 2, 4], True), (2, [1, 2], True),
                                                 (1, [1, 2], False), (0, [1, 2], False)])
def test_rank_counts_come_from_the_gpus(gpus, ranks, on_gpu):
    with mock.patch.object(device, "gpu_count", return_value=gpus):
        plan = device.plan_ranks((1, 2, 4), need=2, cores=2)
        assert device.default_nproc() == (gpus or 2)
    assert (plan.ranks, plan.on_gpu) == (ranks, on_gpu)
    assert plan.env == (device.CPU_ONLY_ENV if gpus == 1 else {})   # 1 GPU: 2 ranks on the CPU
    assert ("left out" in plan.note) == (gpus == 2) and ("CPU with gloo" in plan.note) == (gpus == 1)


def test_capacity_check_refuses_two_ranks_on_one_gpu_unless_they_run_on_the_cpu():
    from dltutor.launch import processes
    with mock.patch.object(device, "gpu_count", return_value=1), \
            mock.patch.object(processes._env, "cpu_cores", return_value=2):
        with pytest.raises(ValueError, match="GPU of its own"):
            processes.check_capacity(2)
        processes.check_capacity(2, env=device.CPU_ONLY_ENV)


def _parameters(name):
    nb = nbformat.read(course_root() / "notebooks" / name, as_version=4)
    return next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))


@pytest.mark.parametrize("gpus", [1, 2, 4])
@pytest.mark.parametrize("name, var", [("02_ddp_multi_gpu.ipynb", "RANKS"),
                                       ("03_horovod_synthetic_resnet50.ipynb", "WORKERS"),
                                       ("05_ring_allreduce_visualizer.ipynb", "RANKS")])
def test_notebooks_never_put_two_ranks_on_one_gpu(name, var, gpus, monkeypatch):
    from dltutor.core import env
    monkeypatch.setenv("DLTUTOR_FAST", "0")
    with mock.patch.object(device, "gpu_count", return_value=gpus), \
            mock.patch.object(env, "cpu_cores", return_value=2):
        ns = {}
        exec(_parameters(name), ns)
    plan = ns["PLAN"]
    assert ns[var] == plan.ranks and 2 in plan.ranks
    if plan.on_gpu:
        assert max(plan.ranks) <= gpus and plan.env == {}
    else:
        assert gpus == 1 and plan.env["CUDA_VISIBLE_DEVICES"] == ""


# ---------------------------------------------------------------- Horovod (item 3)
@pytest.mark.parametrize("on_gpu, built, flags", [
    (False, {"nccl": 1, "mpi": 1}, ["--gloo"]), (True, {"nccl": 1, "mpi": 0}, []),
    (True, {"nccl": 0, "mpi": 1}, []), (True, {"nccl": 0, "mpi": 0, "gloo": 1}, ["--gloo"])])
def test_horovodrun_gets_gloo_only_where_it_must(on_gpu, built, flags):
    from dltutor.launch.backends import horovod_controller_flags
    assert horovod_controller_flags(on_gpu, built) == flags


@pytest.mark.parametrize("gpus, args, gloo", [(0, [], True), (2, [], False),
                                              (2, ["--no-cuda"], True)])
def test_horovod_command_on_cpu_and_gpu_nodes(gpus, args, gloo, tmp_path):
    from dltutor.launch import backends
    with mock.patch.object(device, "gpu_count", return_value=gpus), \
            mock.patch.object(backends, "horovod_built", return_value={"nccl": 1, "gloo": 1}):
        cmd, _ = backends.HorovodBackend().command("x.py", 2, args, port=None, log_dir=tmp_path)
    assert ("--gloo" in cmd) == gloo


def test_doctor_says_rebuild_with_nccl_on_a_gpu_node():
    from dltutor.doctor import OK, PROBLEM, horovod_build_row
    cpu_build = {"nccl": 0, "mpi": False, "gloo": True}
    row = horovod_build_row(cpu_build, gpus=2, python="/x/bin/python")
    assert row.status == PROBLEM and row.fix.startswith(
        "GPU present, Horovod without NCCL: rebuild with DLTUTOR_HOROVOD_NCCL=1 "
        "DLTUTOR_HOROVOD_REBUILD=1 bash scripts/build_horovod.sh /x/bin/python")
    assert horovod_build_row(cpu_build, gpus=0).status == OK
    assert horovod_build_row({**cpu_build, "nccl": 2}, gpus=4).status == OK
    assert "nccl=no, mpi=no, gloo=yes" in horovod_build_row(cpu_build, gpus=0).value


def test_build_script_nccl_switch_is_checked_before_any_build(tmp_path):
    script = course_root().parent / "scripts" / "build_horovod.sh"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DLTUTOR_CACHE": str(tmp_path)}
    bad = subprocess.run(["bash", str(script), sys.executable], capture_output=True, text=True,
                         timeout=120, env={**env, "DLTUTOR_HOROVOD_NCCL": "maybe"})
    assert bad.returncode != 0 and "must be 1, 0 or auto" in bad.stderr
    nccl = subprocess.run(["bash", str(script), sys.executable], capture_output=True, text=True,
                          timeout=120, env={**env, "DLTUTOR_HOROVOD_NCCL": "1"})
    assert nccl.returncode != 0 and "DLTUTOR_HOROVOD_NCCL=1 (NCCL build) needs nvcc" in nccl.stderr


# ---------------------------------------------------------------- timed GPU loops (item 6)
def test_timed_gpu_iterations_synchronize_before_each_clock_read():
    from dltutor.horovod.benchmark import time_iterations
    with nccl_dry_run(world_size=1, rank=0) as run:
        time_iterations(lambda: None, num_iters=3, num_batches_per_iter=2, batch_size=4,
                        device=torch.device("cuda", 0))
    assert run.names().count("synchronize") == 6          # before and after each iteration


# ------------------------------------------- what the first real GPU run found (docs/verified/)
class _Launches:
    """Stands in for dltutor.launch.run.launch: records (nproc, env) and raises after that."""

    def __init__(self):
        self.calls = []

    def __call__(self, script, nproc=None, env=None, **kw):
        self.calls.append((nproc, dict(env or {})))
        raise RuntimeError("recorded")


@pytest.mark.parametrize("helper", ["param_server", "io", "horovod_sweep"])
def test_helpers_put_more_ranks_than_gpus_on_the_cpu(helper, monkeypatch, tmp_path):
    # On the H100 node (1 GPU), notebook 05's parameter server (5 ranks) hung in NCCL with ranks
    # sharing the GPU, and notebook 07's 2 ranks were refused: a helper that starts more ranks
    # than the node has GPUs must hide the GPUs, as plan_ranks says.
    from dltutor.launch import run as run_mod
    monkeypatch.setattr(device, "gpu_count", lambda: 1)
    fake = _Launches()
    monkeypatch.setattr(run_mod, "launch", fake)
    with pytest.raises(RuntimeError, match="recorded"):
        if helper == "param_server":
            from dltutor.allreduce import param_server
            param_server.measure((2, 3, 4), numel=10)
        elif helper == "io":
            from dltutor.io import runs as io_runs
            monkeypatch.setattr(io_runs, "launch", fake)
            io_runs.run_lab(2, tmp_path, 8, 4)
        else:
            from dltutor.horovod import runs as hvd_runs
            plan = device.plan_ranks([2], need=2)
            hvd_runs.sweep_setting("HOROVOD_CYCLE_TIME", [1], [], env=plan.env)
    nproc, env = fake.calls[0]
    assert nproc >= 2 and env.get("CUDA_VISIBLE_DEVICES") == ""


def test_every_launch_in_a_notebook_is_told_where_its_ranks_go():
    # notebook 02's lab check launched 2 ranks with no env: refused on a 1-GPU node
    import re
    for path in sorted((course_root() / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in (c for c in nb.cells if c.cell_type == "code"):
            for call in re.findall(r"(?<![\w.])launch\((?:[^()]|\([^()]*\))*\)", cell.source):
                assert "env=" in call, f"{path.name}: {call[:80]} passes no env= (RankPlan.env)"


def test_buffer_sync_speaks_the_ddp_of_this_torch_and_of_older_ones(monkeypatch):
    # torch 2.11 (the H100 node's) has no forward_sync_buffers: lab 08 failed at DDP(...)
    from torch.nn import parallel

    from dltutor.debug import faults
    assert faults.buffer_sync(False) == {"forward_sync_buffers": False}      # torch 2.14

    class OldDDP:
        def __init__(self, module, device_ids=None, broadcast_buffers=True):
            pass
    monkeypatch.setattr(parallel, "DistributedDataParallel", OldDDP)
    assert faults.buffer_sync(False) == {"broadcast_buffers": False}


def test_an_arch_list_deepspeed_cannot_read_is_replaced(monkeypatch):
    # the H100 image sets TORCH_CUDA_ARCH_LIST=9.0a: DeepSpeed's builder died on int('0a')
    import os

    from dltutor.core import engines
    assert engines.deepspeed_arch_list("9.0a") == "9.0"
    assert engines.deepspeed_arch_list("8.0;9.0a+PTX") == "8.0;9.0+PTX"
    assert engines.deepspeed_arch_list("8.0 9.0") is None
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    engines.apply_engine_env()
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0" and os.environ["DS_ACCELERATOR"] == "cuda"


@pytest.mark.parametrize("rel, before, include", [
    # GCC 13.3 on the H100 node: group_table.h used std::string without <string>
    ("horovod/common/group_table.h", "#include <mutex>", "<string>"),
    # libstdc++ 13.3's headers: common.h throws std::logic_error without <stdexcept>
    ("horovod/common/common.h", "#include <memory>", "<stdexcept>"),
])
def test_the_horovod_patch_adds_the_includes_gcc_13_needs(tmp_path, rel, before, include):
    sys.path.insert(0, str(course_root().parent / "scripts"))
    import re

    import patch_horovod
    header = tmp_path / rel
    header.parent.mkdir(parents=True)
    header.write_text(f"{before}\n#include <queue>\nstd::string x;\n")
    edit = next(e for e in patch_horovod.EDITS if e[0] == rel)
    patched = re.sub(edit[2], edit[3], header.read_text(), count=1, flags=re.M)
    assert patched.startswith(f"{before}\n#include {include}  // dltutor-patch: GCC 13\n")


def test_torchrun_is_given_only_flags_torch_2_11_knows(tmp_path):
    # torch 2.11 on the H200 node (2026-11-26) had no --log-line-prefix-template: torchrun printed
    # its usage, ran no rank, and notebook 08's killed-rank cell failed. tests/seen/ holds that
    # torchrun's --help, as printed there.
    import re

    from dltutor.launch.backends import TorchrunBackend
    seen = (Path(__file__).parent / "seen" / "torchrun_help_torch2.11.txt").read_text()
    assert seen.rstrip().endswith("2.11.0+cu130")
    known = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", seen))
    cmd, extra = TorchrunBackend().command("/x/lab.py", 2, ["--tiny"], port=29500,
                                           log_dir=tmp_path, python="python")
    flags = {a for a in cmd[:cmd.index("/x/lab.py")] if a.startswith("--")}
    assert flags and flags <= known, flags - known
    assert extra["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] == "[rank${rank}]:"
