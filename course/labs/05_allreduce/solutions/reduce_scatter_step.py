"""Solution of notebook 05's exercise: one reduce-scatter step of the ring, with point-to-point.

Hidden from the notebook; the self-check runs it with `check(solution=True)` (on 3, then 4
ranks); tests/test_mutations_ring.py proves the check passes on it and fails on broken copies of
it (tests/answers/05-reduce-scatter/). `run` hands each step the rank's chunks as cut by
torch.tensor_split(vector, world_size): with a length that does not divide by N, the first
length % N chunks are one element longer.
Run by hand: torchrun --nproc-per-node 3 reduce_scatter_step.py
"""
import torch
import torch.distributed as dist

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    n = world_size
    send_chunk = (rank - step + 1) % n        # the slides: at step s rank r sends chunk r - s + 1
    recv_chunk = (rank - step) % n            # ... so its left neighbour sends chunk r - s
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(chunks[recv_chunk])
    # post both before waiting: every rank sends and receives at once (a blocking send first
    # on every rank could wait for ever on a back end that does not buffer)
    requests = [dist.isend(chunks[send_chunk], right), dist.irecv(incoming, left)]
    for request in requests:
        request.wait()
    chunks[recv_chunk] += incoming            # reduce: add, in place (chunks are views)


if __name__ == "__main__":
    run(reduce_scatter_step)
