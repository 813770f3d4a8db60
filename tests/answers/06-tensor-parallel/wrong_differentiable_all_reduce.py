# expect: wrong
# names: input gradient.*2 times too large: the gradient was all-reduced twice
# why: torch.distributed.nn's all_reduce as g: its backward all-reduces dL/dy too, so every gradient below g is world_size times too large
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.nn.functional import all_reduce

from dltutor.model_parallel.exercise_tp import run


class CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad


def tp_mlp(x, w1, b1, w2, b2):
    h = F.gelu(F.linear(CopyToTP.apply(x), w1, b1))
    return all_reduce(F.linear(h, w2)) + b2


if __name__ == "__main__":
    run(tp_mlp)
