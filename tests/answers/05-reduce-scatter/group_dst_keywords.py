# expect: solved
# why: peers given as group_dst=/group_src= (torch >= 2.6), requests waited in reverse order
import torch
import torch.distributed as dist

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    mine = (rank - step + 1) % world_size
    theirs = (mine - 1) % world_size
    got = chunks[theirs].new_empty(chunks[theirs].shape)
    send = dist.isend(chunks[mine], group_dst=(rank + 1) % world_size)
    recv = dist.irecv(got, group_src=(rank + world_size - 1) % world_size)
    recv.wait()
    send.wait()
    chunks[theirs].add_(got)


if __name__ == "__main__":
    run(reduce_scatter_step)
