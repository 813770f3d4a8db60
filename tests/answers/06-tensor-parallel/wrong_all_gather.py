# expect: wrong
# names: all_gather is not part of this exercise.*one dist\.all_reduce each
# why: the partial outputs all-gathered and added up on every rank: the right sum, world_size times the bytes of an all-reduce's result, and not the collective Megatron's g is
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dltutor.model_parallel.exercise_tp import run


class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y):
        parts = [torch.empty_like(y) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, y.contiguous())
        return torch.stack(parts).sum(0)

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
    h = F.gelu(F.linear(Copy.apply(x), w1, b1))
    return Gather.apply(F.linear(h, w2)) + b2


if __name__ == "__main__":
    run(tp_mlp)
