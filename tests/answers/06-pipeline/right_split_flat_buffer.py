# expect: solved
# why: torch.split by rows with index loops, the layers called one by one, a flat receive buffer viewed as rows x width, the losses returned as one tensor
import torch
import torch.distributed as dist

from dltutor.model_parallel.exercise_pp import run


def gpipe_forward(stage, rank, data, m, loss_fn, width):
    rows = data.shape[0] // m
    pieces = torch.split(data, rows)
    if rank == 0:
        for i in range(m):
            h = pieces[i]
            for layer in stage:
                h = layer(h)
            dist.send(h.contiguous(), dst=1)
        return
    out = torch.empty(m, dtype=data.dtype)
    for i in range(m):
        flat = torch.empty(rows * width, dtype=data.dtype)
        dist.recv(flat, src=0)
        out[i] = loss_fn(stage(flat.view(rows, width)), pieces[i]).item()
    return out


if __name__ == "__main__":
    run(gpipe_forward)
