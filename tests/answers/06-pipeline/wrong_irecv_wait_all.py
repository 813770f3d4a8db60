# expect: wrong
# names: rank 1 had received \d micro-batches before it ran stage 1 on micro-batch 0
# why: every irecv posted and waited on before stage 1 runs: asynchronous receives, but stage 1 still waits for all of stage 0
import torch
import torch.distributed as dist

from dltutor.model_parallel.exercise_pp import run


def gpipe_forward(stage, rank, data, m, loss_fn, width):
    if rank == 0:
        for mb in data.chunk(m):
            dist.send(stage(mb), 1)
        return None
    targets = data.chunk(m)
    buffers = [torch.empty(t.shape[0], width, dtype=data.dtype) for t in targets]
    requests = [dist.irecv(b, 0) for b in buffers]
    for r in requests:
        r.wait()
    return [loss_fn(stage(b), t) for b, t in zip(buffers, targets)]


if __name__ == "__main__":
    run(gpipe_forward)
