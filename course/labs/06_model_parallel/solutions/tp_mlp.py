"""Solution of notebook 06's exercise `06-tensor-parallel`: a Megatron MLP by hand.

Hidden from the notebook; the check runs it with `exercise_tp.check(solution=True)`;
tests/test_exercises_model_parallel.py proves it passes, and tests/answers/06-tensor-parallel/
holds the wrong and right answers the check is tried on (tests/test_mutations_model_parallel.py).
Run by hand: torchrun --nproc-per-node 2 tp_mlp.py
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dltutor.model_parallel.exercise_tp import run


class CopyToTP(torch.autograd.Function):       # Megatron's f
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)                       # identity: every rank already holds x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)                     # each rank's slice adds its part of dL/dx
        return grad


class ReduceFromTP(torch.autograd.Function):   # Megatron's g
    @staticmethod
    def forward(ctx, y):
        y = y.contiguous()
        dist.all_reduce(y)                        # the partial outputs, summed
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad                               # identity: every rank needs all of dL/dy


def tp_mlp(x, w1, b1, w2, b2):
    h = F.gelu(F.linear(CopyToTP.apply(x), w1, b1))   # column-parallel: this rank's hidden units
    partial = F.linear(h, w2)                         # row-parallel: a partial sum of the output
    return ReduceFromTP.apply(partial) + b2           # b2 once, after the sum


if __name__ == "__main__":
    run(tp_mlp)
