# expect: wrong
# names: hidden activations were all-reduced, but the column-parallel layer's output stays split
# why: an all-reduce after the column-parallel layer too, as if its output were partial sums
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dltutor.model_parallel.exercise_tp import run


class Sum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        return grad


class Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def tp_mlp(x, w1, b1, w2, b2):
    h = Sum.apply(F.linear(Copy.apply(x), w1, b1))      # the hidden units summed over ranks
    return Sum.apply(F.linear(F.gelu(h), w2)) + b2


if __name__ == "__main__":
    run(tp_mlp)
