"""Ulysses (DeepSpeed-Ulysses): trade the sequence split for a head split, attend, trade back.

Each of P ranks holds S/P positions of all H heads of q, k, v. One all-to-all per tensor turns
that into all S positions of H/P heads: rank r sends head group g of its positions to rank g and
receives group r of everyone's positions, in sequence order (contiguous shards). Attention is then
ordinary one-process attention on whole sequences (causal or not, no ring, no merge), and one more
all-to-all brings the output back to the sequence split. The backward of an all-to-all with equal
splits is the same all-to-all of the gradient, so the backward moves as much as the forward.

Limits: H must be divisible by P (a rank attends to whole heads), so P <= H; with grouped K/V
heads the K/V head count is the limit. Bytes: each tensor of E = b·H·(S/P)·d·size bytes sends
(P-1)/P of itself, 4 tensors each way: 4E(P-1)/P per rank per direction. The ring sends 2E(P-1)
forward (P/2 times as much: equal at P = 2) and 4E(P-1) + 2E backward; the ring has no head limit.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from dltutor.context_parallel import attention as A
from dltutor.context_parallel import sharding


def _world(group) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def _exchange(x, group, stats, key):
    """dist.all_to_all_single of x along dim 0 (equal chunks), bytes counted as they leave."""
    world = _world(group)
    if world == 1:
        return x
    x = x.contiguous()
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)  # CP: chunk j of every rank to rank j
    if stats is not None:
        stats[f"bytes_sent_{key}"] += x.numel() * x.element_size() * (world - 1) // world
        stats[f"messages_{key}"] += world - 1
        stats["messages"] += world - 1
    return out


class _AllToAll(torch.autograd.Function):
    """All-to-all whose backward is the same all-to-all of the gradient (equal splits)."""

    @staticmethod
    def forward(ctx, x, group, stats):
        ctx.group, ctx.stats = group, stats
        return _exchange(x, group, stats, "forward")

    @staticmethod
    def backward(ctx, grad):
        return _exchange(grad, ctx.group, ctx.stats, "backward"), None, None


def seq_to_heads(x, group=None, stats=None):
    """[b, H, S/P, d] (this rank's positions, all heads) -> [b, H/P, S, d] (all positions, its heads)."""
    world = _world(group)
    b, h, n, d = x.shape
    groups = x.reshape(b, world, h // world, n, d).transpose(0, 1)  # [P (to rank), b, H/P, n, d]
    got = _AllToAll.apply(groups, group, stats)  # [P (from rank = sequence chunk), b, H/P, n, d]
    return got.permute(1, 2, 0, 3, 4).reshape(b, h // world, world * n, d)


def heads_to_seq(y, group=None, stats=None):
    """[b, H/P, S, d] -> [b, H, S/P, d]: the inverse of `seq_to_heads`."""
    world = _world(group)
    b, hp, s, d = y.shape
    chunks = y.reshape(b, hp, world, s // world, d).permute(2, 0, 1, 3, 4)  # [P (to rank), b, H/P, n, d]
    got = _AllToAll.apply(chunks, group, stats)  # [P (from rank = head group), b, H/P, n, d]
    return got.transpose(0, 1).reshape(b, hp * world, s // world, d)


def check(heads: int, world_size: int) -> None:
    if heads % world_size:
        raise ValueError(f"Ulysses gives each rank whole heads and {heads} heads are not divisible "
                         f"by {world_size} ranks: use a head count that is a multiple of {world_size} "
                         f"(or at most {heads} ranks that divide it), or ring attention.")


STAT_KEYS = ("bytes_sent_forward", "bytes_sent_backward", "messages", "messages_forward",
             "messages_backward")


def ulysses_attention(q, k, v, *, causal: bool, group=None, stats=None):
    """This rank's attention output for its contiguous sequence shard of q, k, v
    ([batch, heads, S/P, head_dim]); differentiable. `stats` (a dict) gets the bytes counted."""
    world = _world(group)
    check(q.shape[1], world)
    sharding.check(q.shape[2] * world, world, "contiguous")
    if stats is not None:
        for key in STAT_KEYS:
            stats.setdefault(key, 0)
    qh, kh, vh = (seq_to_heads(t, group, stats) for t in (q, k, v))
    return heads_to_seq(A.reference(qh, kh, vh, causal), group, stats)


def bytes_formula(batch, heads, seq, head_dim, world_size, element_size) -> dict:
    """Bytes each rank sends per attention layer: 4 all-to-alls each way (q, k, v in and the
    output back; their gradients in the backward), each sending (P-1)/P of E = b·H·(S/P)·d·size."""
    check(heads, world_size)
    sharding.check(seq, world_size, "contiguous")
    shard = batch * heads * (seq // world_size) * head_dim * element_size
    each = 4 * shard * (world_size - 1) // world_size
    return dict(forward=each, backward=each)
