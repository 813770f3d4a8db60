# expect: solved
# why: other index arithmetic; isend posted first, then a blocking recv, then wait on the send
import torch
from torch.distributed import irecv, isend, recv

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    send_chunk = (rank + world_size - step + 1) % world_size
    recv_chunk = (send_chunk - 1 + world_size) % world_size
    buffer = torch.zeros(chunks[recv_chunk].shape)
    sending = isend(chunks[send_chunk].clone(), (rank + 1) % world_size)
    recv(buffer, (rank + world_size - 1) % world_size)
    sending.wait()
    chunks[recv_chunk].add_(buffer)


if __name__ == "__main__":
    run(reduce_scatter_step)
