# expect: solved
# why: blocking send/recv without a deadlock: even ranks send first, odd ranks receive first
import torch
import torch.distributed as dist

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    send_idx = (rank - step + 1) % world_size
    recv_idx = (rank - step) % world_size
    buf = torch.empty(chunks[recv_idx].numel(), dtype=chunks[recv_idx].dtype)
    if rank % 2 == 0:
        dist.send(tensor=chunks[send_idx], dst=(rank + 1) % world_size)
        dist.recv(tensor=buf, src=(rank - 1) % world_size)
    else:
        dist.recv(tensor=buf, src=(rank - 1) % world_size)
        dist.send(tensor=chunks[send_idx], dst=(rank + 1) % world_size)
    chunks[recv_idx] += buf


if __name__ == "__main__":
    run(reduce_scatter_step)
