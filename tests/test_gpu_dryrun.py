"""The GPU dry run (dltutor.core.gpu_dryrun): lab code driven here, on the CPU, as rank 0 of an
NCCL job on cuda:0, so tensors handed to NCCL on the wrong device are caught without a GPU."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as tdist

from dltutor.core.gpu_dryrun import DryRunError, NoValues, nccl_dry_run


# ---------------------------------------------------------------- what the dry run itself catches
def test_the_dry_run_refuses_what_nccl_or_a_gpu_would_refuse():
    import os
    layer = torch.nn.Linear(2, 2)        # modules are built before the block, moved inside it
    environ = dict(os.environ)
    with nccl_dry_run(world_size=2, rank=0) as run:
        assert torch.cuda.is_available() and torch.cuda.device_count() == 2
        gpu = torch.ones(4, device="cuda:0")
        with pytest.raises(DryRunError, match="a tensor on cpu, but NCCL rank 0"):
            tdist.all_reduce(torch.tensor([1.0], dtype=torch.float64))  # lab 02's old `busy`
        with pytest.raises(RuntimeError, match="same device"):
            gpu + torch.ones(4)                                          # CPU and GPU in one op
        with pytest.raises(DryRunError, match="non-contiguous"):
            tdist.all_reduce(torch.ones(4, 4, device="cuda:0").t())
        q = tdist.isend(gpu, 1)
        with pytest.raises(DryRunError, match="batch_isend_irecv"):      # unbatched pair: a hang
            tdist.irecv(gpu, 1)
        q.wait()
        ops = [tdist.P2POp(tdist.isend, gpu, 1), tdist.P2POp(tdist.irecv, gpu.clone(), 1)]
        [w.wait() for w in tdist.batch_isend_irecv(ops)]
        with pytest.raises(DryRunError, match="device_ids"):
            torch.nn.parallel.DistributedDataParallel(layer.to("cuda:0"), device_ids=[1])
        with pytest.raises(NoValues):
            gpu.sum().item()
    assert run.names() == ["isend", "batch_isend_irecv"]
    assert not torch.cuda.is_available() and not tdist.is_initialized()   # all put back
    assert torch.nn.parallel.DistributedDataParallel.__module__ == "torch.nn.parallel.distributed"
    assert dict(os.environ) == environ


def test_the_dry_run_wants_the_ranks_own_gpu_current_and_gloo_on_the_cpu():
    with nccl_dry_run(world_size=4, rank=3, local_rank=1) as run:
        x = torch.ones(2, device="cuda:1")
        with pytest.raises(DryRunError, match=r"set_device\(cuda:1\)"):
            tdist.all_reduce(x)                          # cuda:0 is still the current GPU
        torch.cuda.set_device(1)
        tdist.all_reduce(x)
        with pytest.raises(DryRunError, match="own GPU cuda:1"):
            tdist.all_reduce(torch.ones(2, device="cuda:0"))
        tdist.init_process_group("gloo")                 # now the checks are gloo's
        tdist.all_reduce(x)                              # gloo stages CUDA all_reduce via the host
        with pytest.raises(DryRunError, match="gloo send needs CPU tensors"):
            tdist.send(x, 0)
        tdist.send(torch.ones(2), 0)
    assert [c.devices for c in run.calls if c.name in ("all_reduce", "send")] == [
        ("cuda:1",), ("cuda:1",), ("cpu",)]


# ---------------------------------------------------------------- lab 02's end-of-run reductions
def test_lab02_end_of_run_reductions_hand_nccl_only_gpu_tensors():
    from dltutor.ddp.run_stats import reduce_run_stats
    with nccl_dry_run(world_size=2, rank=0) as run:
        dev = torch.device("cuda", 0)
        losses = [torch.full((), 2.3 - 0.1 * i, device=dev) for i in range(5)]
        curve, timed, busy = reduce_run_stats(losses, [0.5, 0.4, 0.1, 0.1, 0.1], 2, 2, dev, True)
    assert [(c.name, c.devices, c.detail) for c in run.calls] == [
        ("all_reduce", ("cuda:0",), "SUM"), ("all_reduce", ("cuda:0",), "MAX")]
    assert curve.device == dev and busy.device == dev and busy.dtype == torch.float64
    assert timed.device.type == "cpu" and timed.shape == (3,)


def test_lab02_gradients_by_hand_and_evaluation_stay_on_the_gpu():
    import importlib.util
    from dltutor.core.course import lab
    from dltutor.core.dist import DistContext
    from dltutor.ddp.by_hand import allreduce_gradients
    from dltutor.single import models
    spec = importlib.util.spec_from_file_location("lab02_train", lab("02_ddp/train.py"))
    lab02 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab02)
    model = models.cifar_resnet(width=4)          # real CPU weights, moved to the "GPU" below
    x, y = torch.randn(6, 3, 32, 32), torch.randint(0, 10, (6,))   # lab 02 keeps the test set on the CPU
    dev = torch.device("cuda", 0)
    ctx = DistContext(rank=0, local_rank=0, world_size=2, device=dev, is_distributed=True)
    with nccl_dry_run(world_size=2, rank=0) as run:
        model = model.to(dev)
        for p in model.parameters():
            p.grad = torch.ones_like(p)               # backward needs a real GPU; its gradients
        allreduce_gradients(model.parameters(), 2)   # would be here, on the GPU
        with pytest.raises(NoValues):                # it reads the accuracy: the end of a dry run
            lab02.evaluate(model, x, y, ctx, batch=4)
    assert run.names() == ["all_reduce", "all_reduce"]
    _only_on(run, "cuda:0")


# ---------------------------------------------------------------- lab 05's collectives
@pytest.fixture
def C():
    """dltutor.allreduce.collectives, its kept receive buffers put back after the test."""
    from dltutor.allreduce import collectives
    saved = dict(collectives._SCRATCH)
    yield collectives
    collectives._SCRATCH.clear()
    collectives._SCRATCH.update(saved)


def _only_on(run, dev: str):
    handed = [c for c in run.calls if c.devices]
    assert handed and all(set(c.devices) == {dev} for c in handed), run.calls


@pytest.mark.parametrize("world,rank", [(2, 0), (2, 1), (3, 0), (3, 1), (4, 2)])
@pytest.mark.parametrize("name", ["ring", "reduce_bcast", "recursive_doubling", "gloo"])
def test_allreduce_algorithms_hand_nccl_only_the_ranks_gpu_tensors(C, name, world, rank):
    from dltutor.core.device import device
    with nccl_dry_run(world_size=world, rank=rank) as run:
        torch.cuda.set_device(rank)            # what dltutor.core.dist.init does
        x = torch.ones(1001, device=device())  # cuda:<local rank>
        C.ALLREDUCE[name](x)
        C.ring_allreduce(torch.ones(4099, device=device()), segment_bytes=40)  # many segments
    _only_on(run, f"cuda:{rank}")
    # NCCL: a send and a receive with the same peer go together, in one batch
    for c in run.calls:
        if c.name == "batch_isend_irecv":
            assert "isend" in c.detail or "irecv" in c.detail


def test_ring_pairs_go_as_one_batch_on_nccl(C):
    with nccl_dry_run(world_size=2, rank=0) as run:
        C.ring_allreduce(torch.ones(10, device="cuda:0"))
    assert run.names() == ["batch_isend_irecv"] * 2   # reduce-scatter + all-gather, N = 2
    assert [c.detail for c in run.calls] == ["isend->1 irecv<-1"] * 2


def test_check_against_all_reduce_makes_its_data_on_the_ranks_gpu(C):
    with nccl_dry_run(world_size=2, rank=0) as run, pytest.raises(NoValues):
        C.check_against_all_reduce(C.ring_allreduce, 1001, torch.float32)  # stops at allclose
    assert run.names()[:1] == ["all_reduce"] and "batch_isend_irecv" in run.names()
    _only_on(run, "cuda:0")
    x = C.random_tensor(5, torch.float64, seed=3)          # and on the CPU, outside the dry run
    assert x.device.type == "cpu" and torch.equal(x, C.random_tensor(5, torch.float64, seed=3))


def test_timed_loops_wait_for_the_gpu_and_reduce_on_it(C):
    with nccl_dry_run(world_size=2, rank=0) as run, pytest.raises(NoValues):
        C.time_allreduce(C.ALLREDUCE["gloo"], 4096, iters=3, warmup=1)  # stops at dt.item()
    names = run.names()
    assert names == ["synchronize", "barrier", "all_reduce", "synchronize", "all_reduce"], names
    assert run.calls[-1].detail == "MAX" and run.calls[-1].devices == ("cuda:0",)
    with nccl_dry_run(world_size=2, rank=0) as run:
        t = C.pingpong(1024, iters=2, warmup=1)
    assert t is not None and run.names() == ["synchronize", "send", "recv", "synchronize"] * 3
    _only_on(run, "cuda:0")


# ---------------------------------------------------------------- the device picks the backend
def test_init_on_a_gpu_node_is_cuda_and_nccl_and_no_cuda_is_cpu_and_gloo():
    from dltutor.core import dist
    with nccl_dry_run(world_size=2, rank=1) as run:
        ctx = dist.init()
        assert (ctx.device, ctx.backend, ctx.is_distributed) == (torch.device("cuda", 1), "nccl", True)
        dist.teardown()
    assert run.names() == ["set_device", "init_process_group", "destroy_process_group"]
    assert run.calls[0].devices == ("cuda:1",) and run.calls[1].detail == "nccl"
    with nccl_dry_run(world_size=2, rank=1) as run:
        with dist.session(use_cuda=False) as ctx:          # --no-cuda on a GPU node
            assert (ctx.device, ctx.backend) == (torch.device("cpu"), "gloo")
    assert run.names() == ["init_process_group", "barrier", "destroy_process_group"]
    assert run.calls[0].detail == "gloo"
    assert dist.context() is None


def test_lab03_ddp_no_cuda_on_a_gpu_node_runs_on_cpus_with_gloo(monkeypatch, capsys):
    import runpy
    import sys
    from dltutor.core.course import lab
    script = lab("03_horovod/ddp_synthetic_benchmark.py")
    monkeypatch.setattr(sys, "argv", [str(script), "--no-cuda", "--tiny", "--threads", "1"])
    with nccl_dry_run(world_size=2, rank=0, fake=False) as run:   # real CPU tensors
        runpy.run_path(str(script), run_name="__main__")
    assert ("init_process_group", "gloo") in [(c.name, c.detail) for c in run.calls]
    assert "set_device" not in run.names()
    ddp = [c for c in run.calls if c.name == "DistributedDataParallel"]
    assert len(ddp) == 1 and ddp[0].devices == ("cpu",)
    out = capsys.readouterr().out
    assert "Number of CPUs: 2" in out and '"device": "CPU"' in out


def test_lab05_alone_on_a_gpu_uses_nccl_as_its_label_says():
    import importlib.util
    from dltutor.core.course import lab
    spec = importlib.util.spec_from_file_location("lab05_bench", lab("05_allreduce/allreduce_bench.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from dltutor.core.device import hardware_label
    with nccl_dry_run(world_size=1, rank=0, launcher_env=False) as run:   # plain `python`
        with bench.process_group() as (rank, n):
            assert (rank, n) == (0, 1) and hardware_label() == "GPU/nccl"
    assert [(c.name, c.detail) for c in run.calls if c.name == "init_process_group"] == [
        ("init_process_group", "nccl")]


# ---------------------------------------------------------------- precision from the capability
@pytest.mark.parametrize("capability,dtype,scaled", [((7, 0), torch.float16, True),   # V100
                                                     ((7, 5), torch.float16, True),   # T4
                                                     ((8, 0), torch.bfloat16, False),  # A100
                                                     ((9, 0), torch.bfloat16, False)])  # H100
def test_precision_follows_the_gpus_compute_capability(capability, dtype, scaled):
    from dltutor.core.device import amp_dtype, autocast, device, grad_scaler
    with nccl_dry_run(capability=capability):
        dev = device()
        assert dev == torch.device("cuda", 0)
        assert amp_dtype(dev) == dtype
        assert grad_scaler(dev).is_enabled() is scaled
        with autocast(dev):
            assert torch.get_autocast_dtype("cuda") == dtype
    cpu = torch.device("cpu")
    assert amp_dtype(cpu) == torch.bfloat16 and not grad_scaler(cpu).is_enabled()


# ---------------------------------------------------------------- the batched path, with real data
def _batched_rank(rank: int, world: int, folder: str) -> None:
    """One gloo rank (torch.multiprocessing) running the NCCL code path: paired messages batched."""
    import json
    from pathlib import Path
    from dltutor.allreduce import collectives as C
    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                             world_size=world)
    C.BATCH_P2P, batches, real = True, [0], tdist.batch_isend_irecv

    def counted(ops):
        batches[0] += 1
        return real(ops)
    tdist.batch_isend_irecv = counted
    bad = []
    for name in ("ring", "reduce_bcast", "recursive_doubling"):
        for dtype in (torch.float64, torch.int64):
            for numel in sorted({1, max(1, world - 1), 7, 1001}):
                ok, msg = C.check_against_all_reduce(C.ALLREDUCE[name], numel, dtype, seed=numel)
                bad += [] if ok else [f"{name} {msg}"]
    ok, msg = C.check_against_all_reduce(lambda t: C.ring_allreduce(t, segment_bytes=40), 4099,
                                         torch.float32, seed=9)
    bad += [] if ok else [f"segmented ring {msg}"]
    tdist.destroy_process_group()
    Path(folder, f"rank{rank}.json").write_text(json.dumps({"bad": bad, "batches": batches[0]}))


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 3, 4])
def test_batched_point_to_point_sums_like_all_reduce_on_gloo(tmp_path, world):
    import json
    import torch.multiprocessing as mp
    # forkserver: one server imports torch once and forks every rank of the three worlds from it
    # (spawn paid torch's import in each of the 9 ranks; fork would copy this worker's threads)
    mp.set_forkserver_preload(["torch", "torch.distributed", "dltutor.allreduce.collectives"])
    mp.start_processes(_batched_rank, args=(world, str(tmp_path)), nprocs=world,
                       start_method="forkserver")
    for r in range(world):
        out = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert out["bad"] == [] and out["batches"] > 0, (r, out)


# ---------------------------------------------------------------- the warm start on a GPU node
_SPY_CUDA = """
import json, os
os.environ["OMP_NUM_THREADS"] = "1"     # as dltutor.launch.warm.server_env gives the server
import torch
calls = []
def spy(name, result):
    def f(*a, **k):
        calls.append(name)
        return result
    return f
gpu = dict(is_available=True, device_count=4, current_device=0, get_device_capability=(9, 0),
           get_device_name="H100", is_bf16_supported=True, mem_get_info=(80 << 30, 80 << 30),
           init=None, _lazy_init=None, set_device=None, synchronize=None, get_device_properties=None)
for name, result in gpu.items():
    setattr(torch.cuda, name, spy(name, result))
for name, result in (("_cuda_getDeviceCount", 4), ("_cuda_init", None)):
    setattr(torch._C, name, spy(name, result))
from dltutor.launch import warm_server
warm_server.preload()
print(json.dumps(calls))
from dltutor.core import device
device.gpu_count()                  # the control: a probe after the preload is seen
print(json.dumps(calls))
"""


def test_the_warm_start_server_never_touches_cuda_on_a_gpu_node():
    """A fork after CUDA is initialised hands the rank a broken CUDA: the server, which every
    local rank is forked from, must import all it preloads without a single CUDA call (each
    rank picks its GPU after the fork, in dist.init)."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", _SPY_CUDA], capture_output=True, text=True,
                         timeout=300, check=True).stdout.splitlines()
    during, after = json.loads(out[-2]), json.loads(out[-1])
    assert during == [], f"the warm server's preload called CUDA: {during}"
    assert after, "the spy saw nothing even when asked directly: the check checks nothing"


def test_the_warm_start_server_refuses_to_fork_after_cuda_was_initialised(monkeypatch):
    from dltutor.launch import warm_server
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError, match="CUDA was initialised while preloading"):
        warm_server.preload(names=())


# ---------------------------------------------------------------- lab 10: a stop agreed on the GPU
def test_lab10_stop_on_signal_agrees_with_a_flag_on_the_ranks_gpu():
    """Lab 10's --save-on-signal all-reduces a flag after every step (dltutor.checkpoint.signals):
    under NCCL the flag must live on the rank's GPU; made on the CPU, NCCL would refuse it."""
    from dltutor.checkpoint.signals import StopOnSignal
    from dltutor.core import dist
    stop = StopOnSignal(names=())           # no handler installed: only the agreement is driven
    with nccl_dry_run(world_size=2, rank=1) as run:
        ctx = dist.init()
        with pytest.raises(NoValues):       # the all-reduce passed its checks; .item() reads a value
            stop.agreed(ctx.device)
        assert run.calls[-1].name == "all_reduce" and run.calls[-1].devices == ("cuda:1",)
        assert run.calls[-1].detail == "MAX"
        with pytest.raises(DryRunError, match="a tensor on cpu"):
            stop.agreed(None)               # the flag on the CPU: what NCCL refuses
        dist.teardown()


# ---------------------------------------------------------------- lab 09: messages on the rank's GPU
def test_lab09_ring_and_ulysses_hand_nccl_only_the_ranks_gpu_tensors():
    """The ring's K/V messages (batch_isend_irecv, receive buffers made like the block) and
    Ulysses' two all-to-alls (a whole forward, no number read) stay on this rank's GPU."""
    from dltutor.context_parallel import ring, ulysses
    from dltutor.core import dist
    with nccl_dry_run(world_size=2, rank=1, local_rank=1) as run:
        ctx = dist.init()
        k = torch.ones(1, 2, 4, 8, device=ctx.device)
        recv, works = ring._rotate([k, k], ring._ring(None), None, None, "forward")
        assert {str(t.device) for t in recv} == {"cuda:1"}
        assert run.calls[-1].name == "batch_isend_irecv" and set(run.calls[-1].devices) == {"cuda:1"}
        with pytest.raises(DryRunError, match="a tensor on cpu"):
            ring._rotate([torch.ones(1, 2, 4, 8)], ring._ring(None), None, None, "forward")
        out = ulysses.ulysses_attention(k, k, k, causal=True)
        assert out.device == ctx.device and out.shape == k.shape
        a2a = [c for c in run.calls if c.name == "all_to_all_single"]
        assert len(a2a) == 4 and {d for c in a2a for d in c.devices} == {"cuda:1"}   # q, k, v, out
        dist.teardown()


def test_lab09_expert_counts_are_exchanged_on_the_ranks_gpu():
    """Expert parallelism's count exchange: the counts and their receive buffer on the rank's GPU
    (made on the CPU, NCCL would refuse them)."""
    from dltutor.core import dist
    from dltutor.experts import parallel
    with nccl_dry_run(world_size=2, rank=1, local_rank=1) as run:
        ctx = dist.init()
        matrix = parallel.exchange_counts(torch.zeros(4, dtype=torch.long, device=ctx.device), 2, None)
        assert matrix.device == ctx.device and tuple(matrix.shape) == (2, 2)
        assert run.calls[-1].name == "all_to_all_single" and run.calls[-1].devices == ("cuda:1", "cuda:1")
        with pytest.raises(DryRunError, match="a tensor on cpu"):
            parallel.exchange_counts(torch.zeros(4, dtype=torch.long), 2, None)
        dist.teardown()


def test_lab09_hands_torchs_context_parallel_the_ranks_gpu_tensors(monkeypatch):
    """On a GPU node lab 09's ring_attention.py runs torch's context_parallel by default, on q, k, v
    made on the rank's GPU (torch_cp.run itself builds a DeviceMesh, which the dry run cannot:
    `make gpu-check` runs it for real)."""
    import importlib.util

    from dltutor.context_parallel import torch_cp
    from dltutor.core import dist
    from dltutor.core.course import lab
    spec = importlib.util.spec_from_file_location("lab09_ring", lab("09_long_context/ring_attention.py"))
    ring_lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ring_lab)
    seen = []
    monkeypatch.setattr(torch_cp, "run", lambda q, k, v, causal: seen.append(
        (causal, {str(t.device) for t in (q, k, v)})) or {})
    with nccl_dry_run(world_size=2, rank=1, local_rank=1):
        ctx = dist.init()
        a = ring_lab.parse_args(["--tiny"])
        assert "torch" in a.impl
        ring_lab.torch_checks(a, ctx)
        dist.teardown()
    assert seen == [(False, {"cuda:1"}), (True, {"cuda:1"})]
