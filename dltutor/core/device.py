"""The one device choice of the course, and what follows from it: backend, precision, timing.

`device()` is `cuda:<local_rank>` when a GPU is visible (and allowed), else the CPU; `backend()`
is the torch.distributed backend that matches the device actually used (nccl only for CUDA
tensors), so `--no-cuda` on a GPU node gives CPU + gloo. Mixed precision is chosen from the
device's capability: bf16 on compute capability >= 8.0 (Ampere and newer), fp16 with a GradScaler
on older GPUs (V100, Turing), where bf16 would only be emulated; the CPU autocasts to bf16.
Timed GPU code calls `synchronize` before reading the clock.
"""
from __future__ import annotations

import os


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


def amp_dtype(dev):
    """The autocast dtype for `dev`: bf16 on CPU and on GPUs of compute capability >= 8.0, else fp16."""
    import torch
    if getattr(dev, "type", str(dev)) != "cuda":
        return torch.bfloat16
    major, _ = torch.cuda.get_device_capability(dev)
    return torch.bfloat16 if major >= 8 else torch.float16


def autocast(dev, enabled: bool = True):
    """`torch.autocast` with `amp_dtype(dev)`; a no-op context when not `enabled`."""
    import torch
    dev_type = getattr(dev, "type", str(dev))
    return torch.autocast(dev_type, dtype=amp_dtype(dev) if enabled else None, enabled=enabled)


def grad_scaler(dev, enabled: bool = True):
    """A GradScaler that is active only where fp16 autocast needs one (GPUs without bf16)."""
    import torch
    dev_type = getattr(dev, "type", str(dev))
    active = enabled and dev_type == "cuda" and amp_dtype(dev) == torch.float16
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
