"""Data-parallel pieces a DDP lab shows next to DDP itself, and a reader for the `# DDP:` lines.

* `allreduce_gradients(params, world_size)`: the whole of data parallelism by hand, run AFTER
  backward: every gradient is packed into one flat buffer, summed over ranks with one
  all-reduce, divided by the world size and copied back. DDP computes the same average but
  starts all-reducing each bucket (`bucket_cap_mb`) while backward is still producing the
  remaining gradients (overlap). With `model.no_sync()` around backward, DDP does no
  communication, so this function is the only one — that is the lab's `--no-overlap` mode.
* `param_checksum(model)`: one float that differs when two replicas have drifted apart.
* `tagged_lines(path, tag)` / `show_tagged(path)`: the lines of a script that carry a tag
  comment such as `# DDP:` — what changes from a single-process loop to a distributed one.
"""
from __future__ import annotations

from pathlib import Path


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


def tagged_lines(path, tag: str = "# DDP:") -> list[tuple[int, str]]:
    """`(line number, line)` for every line of `path` that contains `tag`."""
    text = Path(path).read_text().splitlines()
    return [(i, line.rstrip()) for i, line in enumerate(text, start=1) if tag in line]


def show_tagged(path, tag: str = "# DDP:", context: int = 0) -> list[tuple[int, str]]:
    """Print the tagged lines of `path` (with `context` lines around each) and return them."""
    lines = Path(path).read_text().splitlines()
    hits = tagged_lines(path, tag)
    wanted = sorted({j for i, _ in hits for j in range(max(1, i - context),
                                                       min(len(lines), i + context) + 1)})
    print(f"{len(hits)} lines tagged {tag!r} in {Path(path).name}:")
    previous = None
    for j in wanted:
        if previous is not None and j != previous + 1:
            print("     ...")
        mark = ">" if tag in lines[j - 1] else " "
        print(f"{mark}{j:4d}  {lines[j - 1].rstrip()}")
        previous = j
    return hits
