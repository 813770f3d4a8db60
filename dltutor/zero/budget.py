"""A per-process memory budget that is enforced, so an over-budget allocation fails for real.

`apply_budget(mb, dev)` chooses the cap by the device the process trains on:
  * CPU: RLIMIT_DATA (host memory, the kernel enforces it) = what the process holds now plus `mb`
    MiB, after `warm_up()` has paid the start-up costs (threads, malloc arenas, lazy imports); a
    later allocation beyond it fails inside torch ("DefaultCPUAllocator: can't allocate memory").
  * GPU: a device cap, torch.cuda.set_per_process_memory_fraction(fraction, dev), with fraction =
    (memory the caching allocator holds after warm-up + `mb` MiB) / the device's total memory;
    beyond it torch raises a real torch.cuda.OutOfMemoryError ("CUDA out of memory").
Never a simulated check. `cap_kind(dev)` says which cap applies; `is_out_of_memory(text)`
recognises either error in an exception or a log; `usage_note()` says, when an allocation has
failed, what the process held then beside its start-up memory and its limit (the OOM line).
Used by course/labs/04_deepspeed (`--mem-budget-mb`).
"""
from __future__ import annotations

import contextlib
import os
import re
import resource

from dltutor.core.units import MiB

BUDGET_ENV = "DLTUTOR_MEM_BUDGET_MB"
APPLIED: dict = {}   # the budget this process runs under: start (bytes held then), limit, dev


def data_segment_bytes() -> int:
    """This process's VmData (private writable memory: what RLIMIT_DATA limits)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmData in /proc/self/status")


def warm_up(dev=None) -> None:
    """Run a tiny training step so threads, arenas and lazy imports exist before a budget.

    Thread pools (OpenMP, autograd), malloc arenas and modules imported on first use
    (torch._dynamo, which DeepSpeed pulls in) are start-up costs, not the model's; paying them
    first makes the budget measure what the model, its gradients and Adam need.
    """
    import sys

    import torch
    import torch._dynamo  # noqa: F401  (imported lazily by DeepSpeed's hooks otherwise)
    if "deepspeed" in sys.modules:  # its optimizer check imports torch.compile's inductor
        with contextlib.suppress(ImportError):
            import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401
        load_deepspeed_ops()
    from dltutor.core.train_step import train_step
    from dltutor.zero.bert import build_bert, synthetic_mlm_batch
    dev = dev or "cpu"
    m = build_bert(1, 32, 64, 2, 64, 8).to(dev)
    train_step(m, torch.optim.Adam(m.parameters()), *synthetic_mlm_batch(2, 8, 64, device=dev),
               loss_fn=None)


def load_deepspeed_ops() -> None:
    """Load DeepSpeed's compiled ops (cpu_adam, async_io, ...) now, outside the budget.

    They are pre-built by the set-up, but torch rebuilds an op whose build record does not match
    (another environment, a changed compiler): a compiler run under RLIMIT_DATA dies with
    "virtual memory exhausted", which is not the out-of-memory this demo is about."""
    from deepspeed.accelerator import get_accelerator

    from dltutor.core.engines import DEEPSPEED_OPS
    accelerator = get_accelerator()
    for builder_name in DEEPSPEED_OPS.values():
        builder = accelerator.create_op_builder(builder_name)
        if builder is not None and builder.is_compatible(verbose=False):
            builder.load(verbose=False)


def _return_big_blocks(threshold: int = 64 * 1024) -> None:
    """glibc: serve blocks >= 64 KiB by mmap and unmap them on free (M_MMAP_THRESHOLD).

    Otherwise freed tensors may stay in the heap and count against the budget, so a run would
    fail from fragmentation rather than from what it holds.
    """
    import ctypes
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(-3, int(threshold))  # -3 = M_MMAP_THRESHOLD


def cap_kind(dev=None) -> str:
    """Which cap `apply_budget` sets on `dev` (default: this process's device), in words."""
    from dltutor.core.device import device
    dev = device() if dev is None else dev
    if getattr(dev, "type", str(dev)) == "cuda":
        return (f"GPU memory cap on {dev} (torch.cuda.set_per_process_memory_fraction): a real "
                "torch.cuda.OutOfMemoryError beyond it")
    return "host memory cap (RLIMIT_DATA, enforced by the OS kernel): no GPU in use"


def device_fraction(held_bytes: int, mb: float, total_bytes: int) -> float:
    """The share of a GPU of `total_bytes` that allows `mb` MiB beyond `held_bytes`."""
    if total_bytes <= 0:
        raise ValueError(f"device total memory must be positive, got {total_bytes}")
    want = held_bytes + float(mb) * MiB
    if want > total_bytes:
        raise ValueError(f"a budget of {mb} MiB beyond the {held_bytes / MiB:.0f} MiB held is more "
                         f"than the GPU's {total_bytes / MiB:.0f} MiB: choose a smaller budget")
    return want / total_bytes


def cap_device(mb: float, dev, warm: bool = True) -> int:
    """Cap this process's CUDA caching allocator on `dev` at what it holds + `mb` MiB; the limit."""
    import torch
    if warm:
        warm_up(dev)
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()                     # freed warm-up blocks are not the model's
    held = torch.cuda.memory_reserved(dev)
    total = torch.cuda.get_device_properties(dev).total_memory
    fraction = device_fraction(held, mb, total)
    torch.cuda.set_per_process_memory_fraction(fraction, dev)
    APPLIED.update(start=held, limit=int(fraction * total), dev=dev)
    return int(fraction * total)


def apply_budget(mb: float | None = None, warm: bool = True, dev=None) -> int | None:
    """Let this process allocate at most `mb` MiB more than it holds now; the cap is enforced.

    `dev` (default: this process's device, dltutor.core.device.device()) chooses the cap: on a
    GPU `cap_device` (torch.cuda.set_per_process_memory_fraction); on the CPU, RLIMIT_DATA.
    CPU: sets RLIMIT_DATA (soft and hard) to current VmData + budget, so a later malloc/mmap beyond
    it fails and torch raises its real allocator error ("DefaultCPUAllocator: can't allocate
    memory"). RLIMIT_AS is not used: a CUDA build of torch reserves gigabytes of address space
    it never touches. `mb=None` reads `$DLTUTOR_MEM_BUDGET_MB`; returns the limit in bytes.
    """
    if mb is None:
        mb = os.environ.get(BUDGET_ENV) or None
    if mb is None or float(mb) <= 0:
        return None
    from dltutor.core.device import device
    dev = device() if dev is None else dev
    if getattr(dev, "type", str(dev)) == "cuda":
        return cap_device(float(mb), dev, warm)
    if warm:
        warm_up()
    _return_big_blocks()
    start = data_segment_bytes()
    limit = start + int(float(mb) * MiB)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    APPLIED.update(start=start, limit=limit, dev=dev)
    return limit


def held_now(dev=None) -> int:
    """What the budget counts now: VmData on a CPU, the caching allocator's reserve on a GPU."""
    if getattr(dev, "type", str(dev)) == "cuda":
        import torch
        return torch.cuda.memory_reserved(dev)
    return data_segment_bytes()


def usage_note() -> str:
    """' [held X MiB, start-up S MiB, limit L MiB]' under a budget (measured now), else ''."""
    if not APPLIED:
        return ""
    held = held_now(APPLIED["dev"])
    return (f" [held {held / MiB:.0f} MiB, start-up {APPLIED['start'] / MiB:.0f} MiB, "
            f"limit {APPLIED['limit'] / MiB:.0f} MiB]")


def is_out_of_memory(text: str) -> bool:
    """True when `text` (an exception or a log) shows an allocator out-of-memory error."""
    return bool(re.search(r"can't allocate memory|out of memory|MemoryError|"
                          r"Cannot allocate memory|std::bad_alloc", str(text)))


def release_host_memory() -> bool:
    """Give freed heap back to the OS (glibc `malloc_trim`) and restart this process's RSS
    high-water mark (VmHWM) from now (`/proc/self/clear_refs` "5"), so a sweep reports each
    config's own peak. False where either is not available (not Linux/glibc)."""
    import ctypes
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except (OSError, AttributeError):
        return False
    return True


def reset_peak(device=None) -> int:
    """Start a fresh peak for the run about to begin; the bytes allocated now (0 on a CPU, where
    the RSS high-water mark restarts instead: `release_host_memory`).

    max_memory_allocated is a high-water mark for the whole process: a sweep of configs in one
    process would otherwise report the largest config's peak for every later one. The bytes held
    at this moment are reported beside the peak, so peak - start is this run's own."""
    import gc
    gc.collect()                                  # the previous config's engine, if unreferenced
    if device is None or not getattr(device, "type", str(device)).startswith("cuda"):
        release_host_memory()
        return 0
    import torch
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)
