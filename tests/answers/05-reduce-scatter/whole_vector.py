# expect: wrong
# names: whole vector.*one chunk
# why: sends the whole vector every step (right sums, but N-1 vectors per rank instead of (N-1)/N of one)
import torch
import torch.distributed as dist

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    recv_chunk = (rank - step) % world_size
    whole = torch.cat(chunks)                          # everything, every step
    incoming = torch.empty_like(whole)
    requests = [dist.isend(whole, (rank + 1) % world_size),
                dist.irecv(incoming, (rank - 1) % world_size)]
    for request in requests:
        request.wait()
    chunks[recv_chunk] += torch.tensor_split(incoming, world_size)[recv_chunk]


if __name__ == "__main__":
    run(reduce_scatter_step)
