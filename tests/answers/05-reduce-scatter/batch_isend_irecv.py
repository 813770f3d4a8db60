# expect: solved
# why: batch_isend_irecv with P2POps, one request list to wait on
import torch
import torch.distributed as dist

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    left, right = (rank - 1) % world_size, (rank + 1) % world_size
    outgoing = chunks[(rank - step + 1) % world_size]
    target = chunks[(left - step + 1) % world_size]      # what the left neighbour sends
    incoming = torch.zeros_like(target)
    ops = [dist.P2POp(dist.isend, outgoing, right), dist.P2POp(dist.irecv, incoming, left)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    target.add_(incoming)


if __name__ == "__main__":
    run(reduce_scatter_step)
