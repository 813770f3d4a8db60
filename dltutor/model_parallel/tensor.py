"""Megatron-style tensor parallelism written out, beside torch's own (DTensor `parallelize_module`).

An MLP block is `down(gelu(up(x)))`. Tensor parallelism on t ranks splits it so that only one
all-reduce is needed per block in each direction:

    up   = ColumnParallelLinear : rank r keeps rows r*h/t .. (r+1)*h/t of W_up (and of its bias),
                                  so it computes its own slice of the hidden activations;
    down = RowParallelLinear    : rank r keeps the matching columns of W_down; its product is a
                                  partial sum of the output, completed by an all-reduce.

Megatron calls the two communication points f and g:
    f (`copy_to_tp`)      forward: identity             backward: all-reduce of dL/dx
    g (`reduce_from_tp`)  forward: all-reduce of y      backward: identity
Attention splits the same way: q, k, v column-parallel (whole heads per rank), o row-parallel.
Each all-reduce moves a (tokens x d_model) tensor: `block_allreduce_bytes` is the formula and
`CommLog` counts what the from-scratch version actually sent, to check it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------- the single-process layers
class MLP(nn.Module):
    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, hidden), nn.Linear(hidden, d_model)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Attention(nn.Module):
    """Multi-head self-attention with separate q/k/v/o projections. Heads are counted from the
    width of q's output, so the same code runs on a column-parallel shard (fewer heads)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.head_dim = d_model // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        split = lambda t: t.view(b, s, -1, self.head_dim).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)),
                                           is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


# ---------------------------------------------------------------- f and g, with a byte count
@dataclass
class CommLog:
    """What the from-scratch layers sent: one (direction, op, bytes) entry per collective."""
    calls: list = field(default_factory=list)

    def add(self, direction: str, tensor) -> None:
        self.calls.append((direction, "all_reduce", tensor.numel() * tensor.element_size()))

    def count(self, direction: str) -> int:
        return sum(1 for d, _, _ in self.calls if d == direction)

    def nbytes(self, direction: str) -> int:
        return sum(n for d, _, n in self.calls if d == direction)


class _CopyToTP(torch.autograd.Function):  # Megatron's f
    @staticmethod
    def forward(ctx, x, log):
        ctx.log = log
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        if ctx.log is not None:
            ctx.log.add("backward", grad)
        dist.all_reduce(grad)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):  # Megatron's g
    @staticmethod
    def forward(ctx, y, log):
        y = y.contiguous()
        if log is not None:
            log.add("forward", y)
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x, log: CommLog | None = None):
    return _CopyToTP.apply(x, log)


def reduce_from_tp(y, log: CommLog | None = None):
    return _ReduceFromTP.apply(y, log)


# ---------------------------------------------------------------- the split layers
def shard_rows(t, rank: int, world: int):
    """Rank `rank`'s contiguous slice of dim 0 (the output features of an nn.Linear weight)."""
    if t.shape[0] % world:
        raise ValueError(f"dimension {t.shape[0]} is not divisible by {world} tensor-parallel ranks")
    n = t.shape[0] // world
    return t[rank * n:(rank + 1) * n]


class ColumnParallelLinear(nn.Module):
    """y_r = x W_r^T + b_r with W_r the rank's rows of W: each rank computes a slice of y."""

    def __init__(self, full: nn.Linear, rank: int, world: int):
        super().__init__()
        self.weight = nn.Parameter(shard_rows(full.weight.detach(), rank, world).clone())
        self.bias = nn.Parameter(shard_rows(full.bias.detach(), rank, world).clone())

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Partial y = x_r W_r^T from the rank's columns of W; g sums the partials, then the bias
    (kept whole on every rank) is added once."""

    def __init__(self, full: nn.Linear, rank: int, world: int, log: CommLog | None = None):
        super().__init__()
        self.weight = nn.Parameter(shard_rows(full.weight.detach().t(), rank, world).t().clone())
        self.bias = nn.Parameter(full.bias.detach().clone())
        self.log = log

    def forward(self, x):
        return reduce_from_tp(F.linear(x, self.weight), self.log) + self.bias


class TPMLP(nn.Module):
    """`MLP` split over the tensor-parallel ranks: f, column-parallel up, gelu, row-parallel down (g)."""

    def __init__(self, full: MLP, rank: int, world: int, log: CommLog | None = None):
        super().__init__()
        self.log = log
        self.up = ColumnParallelLinear(full.up, rank, world)
        self.down = RowParallelLinear(full.down, rank, world, log)

    def forward(self, x):
        return self.down(F.gelu(self.up(copy_to_tp(x, self.log))))


class TPAttention(nn.Module):
    """`Attention` split by heads: q/k/v column-parallel (heads/world per rank), o row-parallel."""

    def __init__(self, full: Attention, rank: int, world: int, log: CommLog | None = None):
        super().__init__()
        if (full.q.out_features // full.head_dim) % world:
            raise ValueError(f"{full.q.out_features // full.head_dim} heads do not split over "
                             f"{world} ranks")
        self.log, self.head_dim = log, full.head_dim
        self.q, self.k, self.v = (ColumnParallelLinear(getattr(full, n), rank, world) for n in "qkv")
        self.o = RowParallelLinear(full.o, rank, world, log)

    def forward(self, x):  # the single-process code, after f
        return Attention.forward(self, copy_to_tp(x, self.log))


# ---------------------------------------------------------------- the formula and the checks
def block_allreduce_bytes(tokens: int, d_model: int, element_size: int = 4) -> int:
    """Bytes of the one tensor all-reduced per block and direction: tokens x d_model elements."""
    return tokens * d_model * element_size


def ring_bytes_per_rank(nbytes: float, world: int) -> float:
    """What a ring all-reduce of `nbytes` makes each rank send: 2(t-1)/t x nbytes."""
    return 2.0 * (world - 1) / world * nbytes


def shard_of_grad(full_param, kind: str, rank: int, world: int):
    """The slice of a single-process gradient that a split layer's parameter holds."""
    g = full_param.grad
    if kind == "column":
        return shard_rows(g, rank, world)
    if kind == "row_weight":
        return shard_rows(g.t(), rank, world).t()
    return g  # the row-parallel bias is whole


def split_kinds(module: nn.Module) -> dict:
    """name -> 'column' / 'row_weight' / 'whole' for each parameter of TPMLP or TPAttention."""
    kinds = {}
    for name, sub in module.named_modules():
        if isinstance(sub, ColumnParallelLinear):
            kinds.update({f"{name}.weight": "column", f"{name}.bias": "column"})
        elif isinstance(sub, RowParallelLinear):
            kinds.update({f"{name}.weight": "row_weight", f"{name}.bias": "whole"})
    return kinds


def max_grad_error(full: nn.Module, split: nn.Module, rank: int, world: int) -> float:
    """Largest |difference| between the split layer's gradients and its slice of the full ones."""
    ref = dict(full.named_parameters())
    kinds = split_kinds(split)
    errs = [(p.grad - shard_of_grad(ref[n], kinds[n], rank, world)).abs().max().item()
            for n, p in split.named_parameters()]
    return max(errs) if errs else math.nan
