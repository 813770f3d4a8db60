"""A per-process memory budget that the OS enforces, so an over-budget allocation fails for real.

`apply_budget(mb)` sets RLIMIT_DATA to what the process holds now plus `mb` MiB (after
`warm_up()` has paid the start-up costs: threads, malloc arenas, lazy imports), so a later
allocation beyond it fails inside torch's allocator ("DefaultCPUAllocator: can't allocate
memory"), not in a simulated check. `is_out_of_memory(text)` recognises such an error in an
exception or a log. Used by course/labs/04_deepspeed (`--mem-budget-mb`).
"""
from __future__ import annotations

import contextlib
import os
import re
import resource

from dltutor.core.units import MiB

BUDGET_ENV = "DLTUTOR_MEM_BUDGET_MB"


def data_segment_bytes() -> int:
    """This process's VmData (private writable memory: what RLIMIT_DATA limits)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmData in /proc/self/status")


def warm_up() -> None:
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
    m = build_bert(1, 32, 64, 2, 64, 8)
    train_step(m, torch.optim.Adam(m.parameters()), *synthetic_mlm_batch(2, 8, 64), loss_fn=None)


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


def apply_budget(mb: float | None = None, warm: bool = True) -> int | None:
    """Let this process allocate at most `mb` MiB more than it holds now; the kernel enforces it.

    Sets RLIMIT_DATA (soft and hard) to current VmData + budget, so a later malloc/mmap beyond
    it fails and torch raises its real allocator error ("DefaultCPUAllocator: can't allocate
    memory"). RLIMIT_AS is not used: a CUDA build of torch reserves gigabytes of address space
    it never touches. `mb=None` reads `$DLTUTOR_MEM_BUDGET_MB`; returns the limit in bytes.
    """
    if mb is None:
        mb = os.environ.get(BUDGET_ENV) or None
    if mb is None or float(mb) <= 0:
        return None
    if warm:
        warm_up()
    _return_big_blocks()
    limit = data_segment_bytes() + int(float(mb) * MiB)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return limit


def is_out_of_memory(text: str) -> bool:
    """True when `text` (an exception or a log) shows an allocator out-of-memory error."""
    return bool(re.search(r"can't allocate memory|out of memory|MemoryError|"
                          r"Cannot allocate memory|std::bad_alloc", str(text)))
