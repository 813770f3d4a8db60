# expect: solved
# why: asynchronous both ways: rank 0 isends and waits at the end; rank 1 posts every irecv first, then waits on each just before running it
import torch
from torch.distributed import irecv, isend

from dltutor.model_parallel.exercise_pp import run


def gpipe_forward(stage, rank, data, m, loss_fn, width):
    if rank == 0:
        pending = []
        for mb in torch.chunk(data, m):
            out = stage(mb).detach()
            pending.append((isend(out, 1), out))
        for request, _ in pending:
            request.wait()
        return None
    targets = torch.chunk(data, m)
    buffers = [torch.zeros(t.shape[0], width, dtype=data.dtype) for t in targets]
    requests = [irecv(b, 0) for b in buffers]
    losses = []
    for request, buffer, target in zip(requests, buffers, targets):
        request.wait()
        losses.append(loss_fn(stage(buffer), target))
    return losses


if __name__ == "__main__":
    run(gpipe_forward)
