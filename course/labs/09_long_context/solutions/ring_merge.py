"""Solution of notebook 09's exercise `09-ring-attention`: the online-softmax merge and the ring.

Hidden from the notebook; the check runs it with `exercise_ring.check(solution=True)`;
tests/test_exercises_long_context.py proves it passes, and tests/answers/09-ring-attention/ holds
the wrong and right answers the check is tried on (tests/test_mutations_long_context.py).
Run by hand: torchrun --nproc-per-node 3 ring_merge.py
"""
import torch
import torch.distributed as dist

from dltutor.context_parallel.exercise_ring import block, exchange, run


def merge(out, lse, block_out, block_lse):
    new_lse = torch.logaddexp(lse, block_lse)                  # log(e^lse + e^block_lse)
    out = (torch.exp(lse - new_lse).unsqueeze(-1) * out        # the old sum, rescaled
           + torch.exp(block_lse - new_lse).unsqueeze(-1) * block_out)
    return out, new_lse


def ring_attention(q, k, v, causal):
    rank, world = dist.get_rank(), dist.get_world_size()
    n = q.shape[2]
    out = lse = None
    for step in range(world):
        owner = (rank - step) % world          # K/V move to rank + 1: we hold rank - step's chunk
        if not (causal and owner > rank):      # a later chunk is all in the future: skip it
            diagonal = causal and owner == rank
            mask = torch.ones(n, n, dtype=torch.bool).tril() if diagonal else None
            block_out, block_lse = block(q, k, v, mask)
            if out is None:
                out, lse = block_out, block_lse
            else:
                out, lse = merge(out, lse, block_out, block_lse)
        if step < world - 1:                   # pass K/V on: to the right, from the left
            k, v = exchange(k, v, send_to=(rank + 1) % world, recv_from=(rank - 1) % world)
    return out


if __name__ == "__main__":
    run(ring_attention)
