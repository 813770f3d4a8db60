# expect: solved
# why: the plan built with Python lists (no argsort), the counts exchanged as a [world, per_rank] int64 tensor, results scattered back token by token
import torch
import torch.distributed as dist

from dltutor.experts.exercise_dispatch import run


def moe(x, experts, weights, expert, num_experts):
    rank, world = dist.get_rank(), dist.get_world_size()
    per = num_experts // world
    slots = sorted((int(e), t, j) for t, row in enumerate(experts.tolist())
                   for j, e in enumerate(row))              # (expert, token, choice), by expert
    counts = torch.zeros(world, per, dtype=torch.int64)
    for e, _, _ in slots:
        counts[e // per, e % per] += 1
    theirs = torch.empty_like(counts)
    dist.all_to_all_single(theirs, counts)                  # row a: what rank a sends me
    send = counts.sum(1).tolist()
    recv = theirs.sum(1).tolist()
    outgoing = torch.stack([x[t] for _, t, _ in slots]) if slots else x[:0]
    incoming = x.new_zeros(sum(recv), x.shape[1])
    dist.all_to_all_single(incoming, outgoing, recv, send)
    pieces, start = [], 0
    for a in range(world):
        for i in range(per):
            n = int(theirs[a, i])
            pieces.append(expert(rank * per + i, incoming[start:start + n]))
            start += n
    results = torch.cat(pieces) if pieces else incoming
    returned = x.new_zeros(len(slots), x.shape[1])
    dist.all_to_all_single(returned, results, send, recv)
    y = torch.zeros_like(x)
    for (e, t, j), row in zip(slots, returned):
        y[t] = y[t] + weights[t, j] * row
    return y


if __name__ == "__main__":
    run(moe)
