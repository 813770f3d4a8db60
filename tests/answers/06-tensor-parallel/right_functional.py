# expect: solved
# why: from-imported all_reduce with an explicit ReduceOp.SUM, clones instead of in-place on the input, matmul with .T, the bias added with add()
import torch
from torch.distributed import ReduceOp, all_reduce

from dltutor.model_parallel.exercise_tp import run


class Identity_AllReduceGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor):
        return tensor.clone()

    @staticmethod
    def backward(ctx, grad_output):
        g = grad_output.clone()
        all_reduce(g, op=ReduceOp.SUM)
        return g


class AllReduce_IdentityGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor):
        out = tensor.clone()
        all_reduce(out, op=ReduceOp.SUM)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


def tp_mlp(x, w1, b1, w2, b2):
    x = Identity_AllReduceGrad.apply(x)
    hidden = torch.nn.functional.gelu(torch.matmul(x, w1.T).add(b1))
    out = AllReduce_IdentityGrad.apply(torch.matmul(hidden, w2.T))
    return out.add(b2)


run(tp_mlp)
