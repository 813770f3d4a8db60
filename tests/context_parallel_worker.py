"""Worker for tests/test_context_parallel.py: ring attention and Ulysses against one-process
attention, in ONE process group (2 or 4 ranks, one launch each). Every rank builds the same whole
q, k, v and output gradient from one seed, runs the distributed version on its shard and reports
its largest errors, the work and bytes it counted beside their formulas, and the same checks
with the merge or the backward broken on purpose (monkeypatched here, not in the course's code):
those must miss the tolerance, so the exactness tests can catch each mistake."""
import torch
import torch.distributed as dist

from dltutor.context_parallel import attention as A
from dltutor.context_parallel import ring, sharding, ulysses
from dltutor.core import dist as ddist

BATCH, HEADS, HEAD_DIM = 1, 4, 8
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def inputs(seq, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, grad = (torch.randn(BATCH, HEADS, seq, HEAD_DIM, generator=g, dtype=dtype) for _ in range(4))
    return [t.to(device) for t in (q, k, v, grad)]


def check(fn, layout, causal, dtype, ctx, seq, rank=None, world=None, group=None):
    """Largest |error| of this rank's output and dq, dk, dv against the one-process version."""
    rank = ctx.rank if rank is None else rank
    world = ctx.world_size if world is None else world
    q, k, v, grad = inputs(seq, dtype, ctx.device)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = A.reference(*full, causal)
    want = [ref] + list(torch.autograd.grad(ref, full, grad))
    local = [sharding.shard(t, rank, world, layout).requires_grad_() for t in (q, k, v)]
    stats = {}
    kwargs = {"layout": layout} if fn is ring.ring_attention else {}  # Ulysses: contiguous only
    out = fn(*local, causal=causal, group=group, stats=stats, **kwargs)
    got = [out] + list(torch.autograd.grad(out, local, sharding.shard(grad, rank, world, layout)))
    errors = {name: (g - sharding.shard(w, rank, world, layout)).abs().max().item()
              for name, g, w in zip(("out", "dq", "dk", "dv"), got, want)}
    return dict(layout=layout, causal=causal, dtype=str(dtype).split(".")[-1], seq=seq,
                errors=errors, stats=stats, element_size=q.element_size())


def ring_and_ulysses(ctx, seq):
    rows = []
    for dtype in DTYPES.values():
        for causal in (False, True):
            for layout in sharding.LAYOUTS:
                rows.append(dict(method="ring", **check(ring.ring_attention, layout, causal, dtype, ctx, seq)))
            rows.append(dict(method="ulysses", **check(ulysses.ulysses_attention, "contiguous", causal,
                                                       dtype, ctx, seq)))
    return rows


# ---------------------------------------------------------------- the usual mistakes, on purpose
def merge_not_rescaled(out, lse, block_out, block_lse, merge=A.merge):
    """The running output is not rescaled when the max changes: only the new block is weighted."""
    merged, merged_lse = merge(out, lse, block_out, block_lse)
    return out + torch.exp(block_lse - merged_lse)[..., None] * block_out, merged_lse


def dkv_not_sent_home(rotate):
    def patched(tensors, ring_, group, stats, key):
        if key == "backward" and len(tensors) == 2:  # the last hop of dK, dV: dropped
            return list(tensors), []
        return rotate(tensors, ring_, group, stats, key)
    return patched


def mutants(ctx, seq):
    rows = []
    for name, target, attr, broken in (("merge_not_rescaled", A, "merge", merge_not_rescaled),
                                       ("dkv_not_sent_home", ring, "_rotate", dkv_not_sent_home(ring._rotate))):
        original = getattr(target, attr)
        setattr(target, attr, broken)
        try:
            for causal in (False, True):
                rows.append(dict(mutant=name, **check(ring.ring_attention, "zigzag", causal, torch.float64, ctx, seq)))
        finally:
            setattr(target, attr, original)
    return rows


def subgroups(ctx, seq):
    """4 ranks as two rings of 2 ([0, 1] and [2, 3]): peers are found through the group."""
    if ctx.world_size != 4:
        return []
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = groups[ctx.rank // 2]
    return [check(ring.ring_attention, "zigzag", True, torch.float64, ctx, seq,
                  rank=ctx.rank % 2, world=2, group=mine)]


def main():
    with ddist.session() as ctx:
        seq = 32 if ctx.world_size <= 2 else 64
        ddist.report(seq=seq, device=str(ctx.device), backend=ctx.backend,
                     checks=ring_and_ulysses(ctx, seq), mutants=mutants(ctx, seq),
                     subgroups=subgroups(ctx, seq), trap=ring.lse_trap() if ctx.rank == 0 else None)


if __name__ == "__main__":
    main()
