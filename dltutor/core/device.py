"""The one device choice of the course, and what follows from it: backend, precision, timing.

`device()` is `cuda:<local_rank>` when a GPU is visible (and allowed), else the CPU; `backend()`
is the torch.distributed backend that matches the device actually used (nccl only for CUDA
tensors), so `--no-cuda` on a GPU node gives CPU + gloo. Mixed precision is chosen from the
device's capability: bf16 on compute capability >= 8.0 (Ampere and newer), fp16 with a GradScaler
on older GPUs (V100, Turing), where bf16 would only be emulated; the CPU autocasts to bf16.
Timed GPU code calls `synchronize` before reading the clock. Rank counts: `plan_ranks` keeps one
rank per GPU on a GPU node (a lesson that needs more ranks than GPUs runs on the CPU, labelled).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

# Launch env that hides the GPUs from the ranks: they run on the CPU with gloo (and DeepSpeed's
# CPU accelerator); used where a lesson needs more ranks than the node has GPUs.
CPU_ONLY_ENV = {"CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu"}


def device(use_cuda: bool = True, local_rank: int | None = None):
    """`cuda:<local_rank>` when a GPU is visible and `use_cuda`, else `cpu`.

    local_rank defaults to $LOCAL_RANK (set by every launcher, see dltutor.core.dist), else 0."""
    import torch
    if use_cuda and torch.cuda.is_available():
        if local_rank is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def gpu_count() -> int:
    """GPUs this process can see (0 without CUDA)."""
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@dataclass(frozen=True)
class RankPlan:
    """Which rank counts a notebook runs on this node, where, and what it left out (`note`)."""
    ranks: list
    on_gpu: bool
    env: dict = field(default_factory=dict)   # add to the launch's env (CPU_ONLY_ENV or {})
    note: str = ""                            # print it: why some counts or the GPUs are unused

    @property
    def no_cuda(self) -> bool:
        return not self.on_gpu


def plan_ranks(wanted, need: int = 1, gpus: int | None = None, cores: int | None = None) -> RankPlan:
    """The rank counts of `wanted` this node runs one rank per GPU (GPU node) or per core (CPU).

    GPU node: counts above the GPU count are left out (two NCCL ranks cannot share a GPU). When
    the node has fewer GPUs than `need` (the ranks the lesson cannot do without), every run goes
    to the CPU with gloo instead (`env` hides the GPUs; labels say CPU/gloo). CPU node: counts
    above max(need, cores) are left out. `gpus`/`cores` default to this node's.
    """
    from dltutor.core.env import cpu_cores
    wanted = [int(n) for n in ([wanted] if isinstance(wanted, int) else wanted)]
    gpus = gpu_count() if gpus is None else int(gpus)
    cores = cpu_cores() if cores is None else int(cores)
    if gpus >= max(1, need):
        ranks = [n for n in wanted if n <= gpus]
        dropped = [n for n in wanted if n > gpus]
        note = (f"NOTE: {gpus} GPU(s) on this node: runs with {_counts(ranks)} rank(s), one per "
                f"GPU; {_counts(dropped)} left out (two NCCL ranks cannot share a GPU)."
                if dropped else "")
        return RankPlan(ranks, True, {}, note)
    limit = max(need, cores)
    ranks, dropped = [n for n in wanted if n <= limit], [n for n in wanted if n > limit]
    notes = []
    if gpus:
        notes.append(f"NOTE: {gpus} GPU(s) on this node but this lesson needs {need} ranks: its "
                     "runs use the CPU with gloo (GPUs hidden, labelled CPU/gloo), since two "
                     "NCCL ranks cannot share a GPU.")
    if dropped:
        notes.append(f"NOTE: {cores} core(s) here: runs with {_counts(ranks)} rank(s) only "
                     f"({_counts(dropped)} would share cores and measure the oversubscription).")
    return RankPlan(ranks, False, dict(CPU_ONLY_ENV) if gpus else {}, " ".join(notes))


def _counts(ns) -> str:
    return ", ".join(map(str, ns)) or "no"


def default_nproc() -> int:
    """Ranks of a launch that names none: the node's GPUs on a GPU node, else 2."""
    return gpu_count() or 2


def backend(dev=None) -> str:
    """'nccl' when `dev` (default: `device()`) is a CUDA device, else 'gloo'."""
    dev = device() if dev is None else dev
    return "nccl" if getattr(dev, "type", str(dev)).startswith("cuda") else "gloo"


def hardware_label(dev=None) -> str:
    """'GPU/nccl' or 'CPU/gloo': the honest label of printouts and plot titles."""
    return "GPU/nccl" if backend(dev) == "nccl" else "CPU/gloo"


def device_word(dev) -> str:
    """'GPU' or 'CPU', as in the seeds' printed lines."""
    return "GPU" if getattr(dev, "type", str(dev)) == "cuda" else "CPU"


def gpu_precision(capability) -> str:
    """'bf16' on compute capability >= 8.0 (Ampere and newer), 'fp16' below (V100, Turing: bf16
    would be emulated, slowly); 'fp32' for `capability=None` (no GPU). Pure: a (major, minor)."""
    if capability is None:
        return "fp32"
    return "bf16" if int(capability[0]) >= 8 else "fp16"


def training_precision(dev) -> str:
    """What a lab trains in on `dev` by default: fp32 on the CPU, else `gpu_precision` of the GPU
    (mixed precision: fp32 master weights, autocast to this dtype, a GradScaler for fp16)."""
    if getattr(dev, "type", str(dev)) != "cuda":
        return "fp32"
    import torch
    return gpu_precision(torch.cuda.get_device_capability(dev))


def amp_dtype(dev):
    """The autocast dtype for `dev`: bf16 on CPU and on GPUs of compute capability >= 8.0, else fp16."""
    import torch
    if getattr(dev, "type", str(dev)) != "cuda":
        return torch.bfloat16
    return torch.float16 if training_precision(dev) == "fp16" else torch.bfloat16


def autocast(dev, enabled: bool = True, dtype=None):
    """`torch.autocast` with `dtype` (default `amp_dtype(dev)`); a no-op context when not `enabled`."""
    import torch
    dev_type = getattr(dev, "type", str(dev))
    dtype = (dtype or amp_dtype(dev)) if enabled else None
    return torch.autocast(dev_type, dtype=dtype, enabled=enabled)


def grad_scaler(dev, enabled: bool = True, dtype=None):
    """A GradScaler that is active only where fp16 autocast needs one: on GPUs without bf16, or
    wherever `dtype` is torch.float16 (checkpoint its `state_dict()` with the optimizer's)."""
    import torch
    dev_type = getattr(dev, "type", str(dev))
    if dtype is None:
        active = enabled and dev_type == "cuda" and amp_dtype(dev) == torch.float16
    else:
        active = enabled and dtype == torch.float16
    return torch.amp.GradScaler(dev_type if dev_type == "cuda" else "cpu", enabled=active)


def synchronize(dev) -> None:
    """Wait for the GPU's queued work (no-op on CPU): call before reading a clock."""
    if getattr(dev, "type", str(dev)) == "cuda":
        import torch
        torch.cuda.synchronize(dev)


def to_device(x, dev, channels_last: bool = False):
    """`x` on `dev` (non-blocking copy from pinned memory), in channels_last layout if asked."""
    import torch
    x = x.to(dev, non_blocking=True)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x
