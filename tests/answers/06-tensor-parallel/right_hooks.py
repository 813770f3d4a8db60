# expect: solved
# why: no autograd.Function: f as a gradient hook on the input, g as a straight-through sum (the all-reduced value forward, the identity backward)
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dltutor.model_parallel.exercise_tp import run


def summed(grad):
    total = grad.clone()
    dist.all_reduce(total)
    return total


def tp_mlp(x, w1, b1, w2, b2):
    x_in = x.view_as(x)
    x_in.register_hook(summed)                       # f: the input gradient, summed
    hidden = F.gelu(x_in @ w1.t() + b1)
    partial = hidden @ w2.t()
    with torch.no_grad():
        total = partial.detach().clone()
        dist.all_reduce(total)                       # g: the partial outputs, summed
    out = partial + (total - partial).detach()       # forward: total; backward: identity
    return out + b2


if __name__ == "__main__":
    run(tp_mlp)
