# expect: wrong
# names: sent only the first \d+ of chunk \d+'s \d+ elements.*tensor_split
# why: cuts length // N elements per chunk, so the remainder of an uneven length is never reduced
import torch
import torch.distributed as dist

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    per = sum(c.numel() for c in chunks) // world_size      # every chunk the same size?
    send_chunk = (rank - step + 1) % world_size
    recv_chunk = (rank - step) % world_size
    incoming = torch.zeros(per)
    requests = [dist.isend(chunks[send_chunk][:per].contiguous(), (rank + 1) % world_size),
                dist.irecv(incoming, (rank - 1) % world_size)]
    for request in requests:
        request.wait()
    chunks[recv_chunk][:per] += incoming


if __name__ == "__main__":
    run(reduce_scatter_step)
