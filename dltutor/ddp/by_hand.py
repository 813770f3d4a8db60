"""Data parallelism by hand: what DDP does for you, written out for lab 02's `--no-overlap`.

* `allreduce_gradients(params, world_size)`: the whole of data parallelism by hand, run AFTER
  backward: every gradient is packed into one flat buffer, summed over ranks with one
  all-reduce, divided by the world size and copied back. DDP computes the same average but
  starts all-reducing each bucket (`bucket_cap_mb`) while backward is still producing the
  remaining gradients (overlap). With `model.no_sync()` around backward, DDP does no
  communication, so this function is the only one — that is the lab's `--no-overlap` mode.
* `param_checksum(model)`: one float that differs when two replicas have drifted apart.
"""
from __future__ import annotations


def allreduce_gradients(params, world_size: int, group=None) -> int:
    """Average the `.grad` of `params` over all ranks in one flat all-reduce; returns #elements.

    Call after `loss.backward()` and before `optimizer.step()`. Parameters without a gradient
    are skipped (every rank must skip the same ones, as with any collective).
    """
    import torch
    import torch.distributed as tdist

    grads = [p.grad for p in params if p.grad is not None]
    if not grads or world_size <= 1:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    tdist.all_reduce(flat, op=tdist.ReduceOp.SUM, group=group)
    flat.div_(world_size)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n
    return offset


def param_checksum(model) -> float:
    """Sum of |w| over all parameters, in float64: equal on every rank while replicas agree."""
    import torch
    with torch.no_grad():
        return float(sum(p.detach().double().abs().sum() for p in model.parameters()))

