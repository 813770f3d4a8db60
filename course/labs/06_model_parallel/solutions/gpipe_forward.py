"""Solution of notebook 06's exercise `06-pipeline`: a GPipe forward over 2 stages, by hand.

Hidden from the notebook; the check runs it with `exercise_pp.check(solution=True)`;
tests/test_exercises_model_parallel.py proves it passes, and tests/answers/06-pipeline/ holds the
wrong and right answers the check is tried on (tests/test_mutations_model_parallel.py).
Run by hand: torchrun --nproc-per-node 2 gpipe_forward.py
"""
import torch
import torch.distributed as dist

from dltutor.model_parallel.exercise_pp import run


def gpipe_forward(stage, rank, data, m, loss_fn, width):
    if rank == 0:                                   # stage 0: the inputs, the first layers
        for micro_batch in data.chunk(m):           # m micro-batches, in order
            dist.send(stage(micro_batch), dst=1)    # each activation leaves as soon as it exists
        return None
    losses = []                                     # stage 1: the targets, the last layers
    for target in data.chunk(m):
        activation = torch.empty(target.shape[0], width, dtype=target.dtype)
        dist.recv(activation, src=0)                # micro-batch k arrives k-th
        losses.append(loss_fn(stage(activation), target))
    return losses


if __name__ == "__main__":
    run(gpipe_forward)
