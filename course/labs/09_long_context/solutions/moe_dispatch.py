"""Solution of notebook 09's exercise `09-moe-dispatch`: expert-parallel dispatch and combine.

Hidden from the notebook; the check runs it with `exercise_dispatch.check(solution=True)`;
tests/test_exercises_long_context.py proves it passes, and tests/answers/09-moe-dispatch/ holds
the wrong and right answers the check is tried on (tests/test_mutations_long_context.py).
Run by hand: torchrun --nproc-per-node 2 moe_dispatch.py
"""
import torch
import torch.distributed as dist

from dltutor.experts.exercise_dispatch import run


def moe(x, experts, weights, expert, num_experts):
    rank, world = dist.get_rank(), dist.get_world_size()
    per_rank = num_experts // world
    T, k = experts.shape
    flat = experts.reshape(-1)                 # one row per (token, choice): T*k rows
    rows = x.repeat_interleave(k, dim=0)       # row i is token i // k
    order = torch.argsort(flat, stable=True)   # grouped by expert, hence by destination rank

    # count exchange: rows per expert, to every rank; back: rows per (source, my expert)
    counts = torch.bincount(flat, minlength=num_experts)
    incoming = torch.empty_like(counts)
    dist.all_to_all_single(incoming, counts)              # per_rank counts to each rank
    incoming = incoming.view(world, per_rank)             # [source rank, my local expert]
    sent = counts.view(world, per_rank).sum(1).tolist()   # rows to each rank
    received = incoming.sum(1).tolist()                   # rows from each rank

    # dispatch: the rows, grouped by destination rank
    arrived = rows.new_empty(sum(received), x.shape[1])
    dist.all_to_all_single(arrived, rows[order].contiguous(), received, sent)

    # local experts: from each source, its rows for my first expert, then my second, ...
    chunks = torch.split(arrived, incoming.reshape(-1).tolist())
    done = [expert(rank * per_rank + i % per_rank, c) for i, c in enumerate(chunks)]
    done = torch.cat(done) if done else arrived

    # combine: the results go back the way they came (the split sizes swapped)
    back = rows.new_empty(sum(sent), x.shape[1])
    dist.all_to_all_single(back, done.contiguous(), sent, received)
    out = torch.empty_like(back)
    out[order] = back                                     # each row back in its token's place
    return (out.view(T, k, -1) * weights.unsqueeze(-1)).sum(1)


if __name__ == "__main__":
    run(moe)
