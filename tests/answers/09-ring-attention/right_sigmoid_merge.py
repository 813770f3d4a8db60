# expect: solved
# why: the merge in sigmoid form (as ring-flash-attention writes it), K/V exchanged at the top of each later step, blocks collected first then merged in a fold
import functools

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dltutor.context_parallel.exercise_ring import block, exchange, run


def merge(out, lse, block_out, block_lse):
    w = torch.sigmoid(block_lse - lse).unsqueeze(-1)
    return out - w * (out - block_out), lse - F.logsigmoid(lse - block_lse)


def ring_attention(q, k, v, causal):
    rank = dist.get_rank()
    world = dist.get_world_size()
    tril = torch.tril(torch.ones(q.size(2), k.size(2), dtype=torch.bool))
    parts = []
    for step in range(world):
        if step:
            k, v = exchange(k, v, (rank + 1) % world, (rank - 1) % world)
        j = (rank - step) % world
        if causal and j > rank:
            continue
        parts.append(block(q, k, v, tril if causal and j == rank else None))
    out, _ = functools.reduce(lambda acc, b: merge(*acc, *b), parts[1:], parts[0])
    return out


if __name__ == "__main__":
    run(ring_attention)
