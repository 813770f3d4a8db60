"""ZeRO-Infinity's page-locked swap buffers: what DeepSpeed locks for NVMe offload, the process's
locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`) and buffer sizes that fit under it.

DeepSpeed 0.19 mlock()s every NVMe swap buffer (deepspeed_pin_tensor.cpp); over the limit the rank
aborts with "mlock failed". Measured (VmLck) and read from deepspeed/runtime/swap_tensor and
zero/stage3.py, it locks, each buffer rounded up to 1 KiB x aio.intra_op_parallelism:
  - offload_param: buffer_count x buffer_size elements in the parameters' dtype (read back);
  - one write buffer: the largest optimizer sub-group's tensors, in the parameters' dtype;
  - offload_optimizer: buffer_count x the largest sub-group in fp32; Adam needs 4 of them at
    once (fp32 weights, its two moments, the gradient), so 4 is the least.
Only tensors of at least 1 MiB (and aio.block_size) go to disk; smaller ones stay in RAM.
Root (CAP_IPC_LOCK) has no limit; a default `ulimit -l` of 8 MiB (Debian/Ubuntu, many
JupyterHubs) holds the least set of 6 buffers only when the largest fp32 tensor is <= 8/6 MiB.
"""
from __future__ import annotations

import math
import resource

MiB = 1024 ** 2
ALIGN_BYTES = 1024             # DeepSpeed's I/O alignment per intra-op thread
ADAM_BUFFERS = 4               # fp32 weights, exp_avg, exp_avg_sq, gradient
FAST_PARAM_BUFFERS = 4         # "auto" parameter buffers when the limit allows them
DS_DEFAULTS = {"param_count": 5, "optimizer_count": 4, "buffer_size": 100_000_000,
               "sub_group_size": 1_000_000_000}
CAP_IPC_LOCK = 14


class LockedMemoryError(ValueError):
    """The swap buffers cannot fit the locked-memory limit: the limit, the need, what to do."""


def uses_nvme(zero: dict) -> bool:
    return any((zero.get(k) or {}).get("device") == "nvme"
               for k in ("offload_param", "offload_optimizer"))


def has_ipc_lock(status: str = "/proc/self/status") -> bool:
    """Whether this process may lock memory without a limit (CAP_IPC_LOCK in its effective set)."""
    try:
        for line in open(status):
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_IPC_LOCK & 1)
    except OSError:
        pass
    return False


def locked_limit() -> tuple[int | None, int | None]:
    """(soft, hard) RLIMIT_MEMLOCK in bytes; None where unlimited (or CAP_IPC_LOCK ignores it)."""
    if has_ipc_lock():
        return None, None
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return tuple(None if v == resource.RLIM_INFINITY else v for v in (soft, hard))


def raise_soft_limit(need: int) -> tuple[int, int | None] | None:
    """Soft RLIMIT_MEMLOCK up to the hard one when `need` bytes exceed it: (old, new) or None."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or soft >= need or soft == hard:
        return None
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
    return soft, None if hard == resource.RLIM_INFINITY else hard


def param_numels(model_flags: dict) -> list[int]:
    """The BERT's trainable tensors' sizes, in DeepSpeed's order (built on the meta device)."""
    import torch
    from dltutor.zero.bert import build_bert
    with torch.device("meta"):
        model = build_bert(**model_flags)
    return [p.numel() for p in model.parameters() if p.requires_grad]


def sub_groups(numels: list[int], size: int) -> list[list[int]]:
    """Indices of DeepSpeed's optimizer sub-groups: tensors in order until `size` is reached."""
    if size >= sum(numels):
        return [list(range(len(numels)))]
    groups, group, total = [], [], 0
    for i, n in enumerate(numels):
        group.append(i)
        total += n
        if total >= size or i == len(numels) - 1:
            groups.append(group)
            group, total = [], 0
    return groups


def _aligned(numel: int, elem_bytes: int, aio: dict) -> int:
    align = ALIGN_BYTES * int(aio.get("intra_op_parallelism", 1))
    return math.ceil(numel * elem_bytes / align) * align


def locked_parts(numels: list[int], zero: dict, aio: dict, param_bytes: int,
                 world_size: int = 1) -> dict[str, int]:
    """Bytes DeepSpeed locks for NVMe offload with `zero` (sizes filled in), by buffer kind."""
    parts_numel = [math.ceil(n / world_size) for n in numels]
    groups = sub_groups(parts_numel, int(zero.get("sub_group_size", DS_DEFAULTS["sub_group_size"])))
    largest = max(groups, key=lambda g: sum(parts_numel[i] for i in g))
    off_p, off_o = zero.get("offload_param") or {}, zero.get("offload_optimizer") or {}
    parts = {}
    if off_p.get("device") == "nvme":
        count = int(off_p.get("buffer_count", DS_DEFAULTS["param_count"]))
        size = int(off_p.get("buffer_size", DS_DEFAULTS["buffer_size"]))
        parts["parameters"] = count * _aligned(size, param_bytes, aio)
        parts["write"] = sum(_aligned(numels[i], param_bytes, aio) for i in largest)
    if off_o.get("device") == "nvme":
        count = int(off_o.get("buffer_count", DS_DEFAULTS["optimizer_count"]))
        parts["optimizer"] = count * _aligned(max(sum(parts_numel[i] for i in g)
                                                   for g in groups), 4, aio)
    return parts


def _fill(zero: dict, numels: list[int], world_size: int, group: int, param_count: int) -> dict:
    """A copy of `zero` with its "auto" swap sizes filled: sub-groups of `group` elements,
    `param_count` parameter buffers of the largest tensor, the 4 optimizer buffers Adam needs."""
    out = dict(zero, offload_param=dict(zero.get("offload_param") or {}),
               offload_optimizer=dict(zero.get("offload_optimizer") or {}))
    if out.get("sub_group_size") == "auto":
        out["sub_group_size"] = group
    off_p, off_o = out["offload_param"], out["offload_optimizer"]
    if off_p.get("buffer_size") == "auto":
        off_p["buffer_size"] = max(math.ceil(n / world_size) for n in numels)
    if off_p.get("buffer_count") == "auto":
        off_p["buffer_count"] = param_count
    if off_o.get("buffer_count") == "auto":
        off_o["buffer_count"] = ADAM_BUFFERS
    return out


def _mib(n) -> str:
    return "unlimited" if n is None else f"{n / MiB:.3g} MiB"


def fit(zero: dict, aio: dict, model_flags: dict, param_bytes: int, world_size: int = 1):
    """Fill `zero`'s "auto" NVMe swap sizes in place so that the buffers fit this process's
    locked-memory limit (first raising the soft limit to the hard one when that is needed).
    Returns a line saying what was done (None: the fast sizes fit as they are); raises
    LockedMemoryError, before DeepSpeed starts, when even the least buffers do not fit."""
    if not uses_nvme(zero):
        return None
    numels = param_numels(model_flags)
    fast = _fill(zero, numels, world_size, max(numels), FAST_PARAM_BUFFERS)
    need = sum(locked_parts(numels, fast, aio, param_bytes, world_size).values())
    soft, hard = locked_limit()
    notes = []
    if soft is not None and need > soft:
        raised = raise_soft_limit(need)
        if raised:
            notes.append(f"raised the soft locked-memory limit from {_mib(raised[0])} to its hard "
                         f"limit, {_mib(raised[1])}")
        soft, hard = locked_limit()
    if soft is None or need <= soft:
        zero.update(fast)
        return ("NVMe offload: " + "; ".join(notes) + f" (swap buffers {_mib(need)})") if notes \
            else None
    lean, parts, count = smallest_fit(zero, numels, aio, param_bytes, world_size, soft, hard)
    zero.update(lean)
    return "NVMe offload: " + "".join(n + "; " for n in notes) + (
        f"swap buffers sized to fit the locked-memory limit of {_mib(soft)} (ulimit -l): "
        f"{count} parameter buffer(s), optimizer sub-groups of {lean['sub_group_size']:,} "
        f"elements, {_mib(sum(parts.values()))} locked ("
        + ", ".join(f"{k} {_mib(v)}" for k, v in parts.items()) +
        f") instead of {_mib(need)}; `ulimit -l unlimited` lets DeepSpeed use bigger, faster ones")


def smallest_fit(zero, numels, aio, param_bytes, world_size, soft, hard):
    """(zero filled, locked parts, parameter buffers) under `soft` bytes: the biggest optimizer
    sub-groups first (more of Adam's state goes to disk), then as many parameter buffers as fit.
    LockedMemoryError when not even 1 parameter buffer and one tensor per sub-group fit."""
    for group in sorted({max(max(numels) >> k, 1) for k in range(64)}, reverse=True):
        for count in range(FAST_PARAM_BUFFERS, 0, -1):
            lean = _fill(zero, numels, world_size, group, count)
            parts = locked_parts(numels, lean, aio, param_bytes, world_size)
            if sum(parts.values()) <= soft:
                return lean, parts, count
    raise LockedMemoryError(too_small(soft, hard, numels, parts, param_bytes, zero))


def too_small(soft, hard, numels, parts, param_bytes, zero) -> str:
    """The one error: the limit, what the least buffers need, and what to do."""
    per_elem = 2 * param_bytes + ADAM_BUFFERS * 4
    fixed = [k for k in ("sub_group_size",) if zero.get(k) not in (None, "auto")] + [
        f"{sec}.{k}" for sec in ("offload_param", "offload_optimizer")
        for k in ("buffer_count", "buffer_size") if (zero.get(sec) or {}).get(k) not in (None, "auto")]
    hint = (f" (the config fixes {', '.join(fixed)}: set them to \"auto\" to size them to the "
            "limit)") if fixed else ""
    return (f"NVMe offload needs at least {_mib(sum(parts.values()))} of locked memory for "
            f"DeepSpeed's swap buffers ({', '.join(f'{k} {_mib(v)}' for k, v in parts.items())};"
            f" the model's largest tensor has {max(numels):,} elements){hint}, but this process may "
            f"lock only {_mib(soft)} (ulimit -l; hard limit {_mib(hard)}). Run `ulimit -l "
            "unlimited` in the job (or ask the admins for memlock unlimited, "
            "/etc/security/limits.conf), or train a smaller model: largest tensor (--vocab x "
            f"--h_dim, --h_dim x --ff_dim, 3 x --h_dim^2) at most about {soft // per_elem:,} "
            "elements.")
