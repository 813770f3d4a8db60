# expect: wrong
# names: ran stage 0 once on the whole batch of \d+ rows, then sent \d+ piece\(s\).*never overlapped
# why: stage 0 run on the whole batch, then its output sent in micro-batches: the sends look right, but stage 1 cannot start until stage 0 has done everything
import torch
import torch.distributed as dist

from dltutor.model_parallel.exercise_pp import run


def gpipe_forward(stage, rank, data, m, loss_fn, width):
    if rank == 0:
        out = stage(data)
        for piece in out.chunk(m):
            dist.send(piece.contiguous(), dst=1)
        return None
    losses = []
    for target in data.chunk(m):
        act = torch.empty(target.shape[0], width, dtype=data.dtype)
        dist.recv(act, src=0)
        losses.append(loss_fn(stage(act), target))
    return losses


if __name__ == "__main__":
    run(gpipe_forward)
