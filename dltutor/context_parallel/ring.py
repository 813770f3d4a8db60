"""Ring attention written by the course: each rank keeps its queries, K/V travel round the ring.

P ranks each hold S/P positions of q, k, v (`sharding`: contiguous or zigzag). At step s rank r
holds the K/V block of rank r-s, computes that block of attention for its own queries (`block`)
and merges it into its running (out, lse) with the online-softmax rule (`attention.merge`), while
the block moves on to rank r+1 (`dist.batch_isend_irecv`). After P steps every query has seen
every key, and no rank ever held more than two K/V blocks.

Causal masking comes from the global positions (`sharding.positions`): a (queries, keys) block
entirely in the future is skipped; a block partly in the future computes only the rows and
columns the mask lets through (zigzag: half blocks) and masks the rest.

The backward pass is written out too (`_Ring.backward`): each block's probabilities are
recomputed from q, k and the saved lse, dQ stays home, and the gradient accumulators dK, dV travel
round the ring with their K/V, one more hop at the end bringing them home. Why not let autograd
go through a fused kernel instead: see `lse_trap`.

Work is counted in units of one full (S/P) x (S/P) block: `blocks` counts the (query, key) pairs
the mask lets through (what a fused kernel computes), `blocks_computed` the scores this written-out
code computes (it masks inside a partly masked block). Bytes count what leaves this rank.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from dltutor.context_parallel import attention as A
from dltutor.context_parallel import sharding


@dataclass
class Plan:
    """The part of one (queries, keys) block that is computed, and its mask (None: all of it)."""
    rows: torch.Tensor
    cols: torch.Tensor
    mask: torch.Tensor | None
    useful: int    # (query, key) pairs the mask lets through
    computed: int  # scores computed: len(rows) * len(cols)


def plan(q_positions, k_positions, causal: bool) -> Plan | None:
    """What to compute of one block; None when the whole block is in the future (causal)."""
    nq, nk = len(q_positions), len(k_positions)
    if not causal:
        return Plan(torch.arange(nq), torch.arange(nk), None, nq * nk, nq * nk)
    allowed = A.causal_allowed(q_positions, k_positions)
    useful = int(allowed.sum())
    if useful == 0:
        return None
    rows, cols = allowed.any(1).nonzero().flatten(), allowed.any(0).nonzero().flatten()
    sub = allowed[rows][:, cols]
    return Plan(rows, cols, None if bool(sub.all()) else sub, useful, len(rows) * len(cols))


def _to(p: Plan | None, device) -> Plan | None:
    if p is None:
        return None
    mask = None if p.mask is None else p.mask.to(device)
    return Plan(p.rows.to(device), p.cols.to(device), mask, p.useful, p.computed)


def _ring(group):
    """(rank, world_size, global rank of the next rank, of the previous rank) in `group`."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1, 0, 0
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    glob = (lambda r: dist.get_global_rank(group, r)) if group is not None else (lambda r: r)
    return rank, world, glob((rank + 1) % world), glob((rank - 1) % world)


def _rotate(tensors, ring, group, stats, key):
    """Send `tensors` to the next rank, receive the previous rank's; returns (buffers, works)."""
    _, _, nxt, prv = ring
    recv = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t.contiguous(), nxt, group) for t in tensors]  # CP: to rank+1
    ops += [dist.P2POp(dist.irecv, r, prv, group) for r in recv]  # CP: from rank-1
    if stats is not None:
        stats[f"bytes_sent_{key}"] += sum(t.numel() * t.element_size() for t in tensors)
        stats[f"messages_{key}"] += len(tensors)
        stats["messages"] += len(tensors)
    return recv, dist.batch_isend_irecv(ops)  # CP: all sends and receives posted together


def _wait(works):
    for w in works:
        w.wait()


def _plans(q, causal, layout, ring):
    """The plan of every step (made on the CPU, then moved to q's device): step s meets the K/V
    of rank (rank - s) mod P."""
    rank, world = ring[0], ring[1]
    seq = q.shape[2] * world
    mine = sharding.positions(seq, rank, world, layout)
    return [_to(plan(mine, sharding.positions(seq, (rank - s) % world, world, layout), causal), q.device)
            for s in range(world)]


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, layout, group, stats):
        ring = _ring(group)
        world, n = ring[1], q.shape[2]
        plans = _plans(q, causal, layout, ring)
        out, lse = A.empty_state(q)
        k_own, v_own = k, v  # the backward starts from this rank's own K/V
        for s, p in enumerate(plans):
            works = []
            if s < world - 1:  # the next block is on its way while this one is computed
                (k_next, v_next), works = _rotate([k, v], ring, group, stats, "forward")
            if p is not None:
                bo, bl = A.block(q.index_select(2, p.rows), k.index_select(2, p.cols),
                                 v.index_select(2, p.cols), p.mask)
                mo, ml = A.merge(out.index_select(2, p.rows), lse.index_select(2, p.rows), bo, bl)
                out.index_copy_(2, p.rows, mo)
                lse.index_copy_(2, p.rows, ml)
                if stats is not None:
                    stats["blocks"] += p.useful / n ** 2
                    stats["blocks_computed"] += p.computed / n ** 2
            if works:
                _wait(works)
                k, v = k_next, v_next
        ctx.save_for_backward(q, k_own, v_own, out, lse)
        ctx.plans, ctx.ring, ctx.group, ctx.stats = plans, ring, group, stats
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        ring, group, stats, world = ctx.ring, ctx.group, ctx.stats, ctx.ring[1]
        grad_out = grad_out.contiguous()
        delta = (grad_out * out).sum(-1)  # D_i = Σ_j dO_ij O_ij
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        scale = A.scale(q.shape[-1])
        for s, p in enumerate(ctx.plans):
            if p is not None:
                qr, do, kc, vc = (q.index_select(2, p.rows), grad_out.index_select(2, p.rows),
                                  k.index_select(2, p.cols), v.index_select(2, p.cols))
                scores = qr @ kc.transpose(-2, -1) * scale
                if p.mask is not None:
                    scores = scores.masked_fill(~p.mask, float("-inf"))
                prob = torch.exp(scores - lse.index_select(2, p.rows)[..., None])
                dv.index_add_(2, p.cols, prob.transpose(-2, -1) @ do)
                dscores = prob * (do @ vc.transpose(-2, -1) - delta.index_select(2, p.rows)[..., None])
                dq.index_add_(2, p.rows, dscores @ kc * scale)
                dk.index_add_(2, p.cols, dscores.transpose(-2, -1) @ qr * scale)
            if world == 1:
                break
            if s < world - 1:  # K/V and their gradient accumulators move on together
                (k, v, dk, dv), works = _rotate([k, v, dk, dv], ring, group, stats, "backward")
            else:  # one more hop: the accumulators come home to the rank that owns K/V
                (dk, dv), works = _rotate([dk, dv], ring, group, stats, "backward")
            _wait(works)
        return dq, dk, dv, None, None, None, None


STAT_KEYS = ("blocks", "blocks_computed", "bytes_sent_forward", "bytes_sent_backward",
             "messages", "messages_forward", "messages_backward")


def ring_attention(q, k, v, *, causal: bool, layout: str = "contiguous", group=None, stats=None):
    """This rank's attention output for its shard of q, k, v ([batch, heads, S/P, head_dim], in
    `layout`); differentiable (the backward goes round the ring). `stats`, a dict, gets the work
    and bytes counted (STAT_KEYS; added to, so one dict can sum several calls)."""
    world = _ring(group)[1]
    sharding.check(q.shape[2] * world, world, layout)
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k and v must have the same shape [batch, heads, S/P, head_dim], "
                         f"not {list(q.shape)}, {list(k.shape)}, {list(v.shape)}.")
    if stats is not None:
        for key in STAT_KEYS:
            stats.setdefault(key, 0)
    return _Ring.apply(q, k, v, causal, layout, group, stats)


def blocks_formula(world_size: int, layout: str, causal: bool, seq: int | None = None) -> list[float]:
    """Blocks of work per rank, in units of one (S/P) x (S/P) block, counted as (query, key) pairs
    the mask lets through. Non-causal: P each. Causal, contiguous: r + 1/2 (+ 1/(2n) with n = S/P:
    the diagonal of a block); zigzag: P/2 (+ 1/(2n)) on every rank. seq=None: the large-S limit."""
    sharding.check(seq if seq is not None else 2 * world_size, world_size, layout)
    if not causal:
        return [float(world_size)] * world_size
    diagonal = 0.0 if seq is None else 1 / (2 * (seq // world_size))
    if layout == "contiguous":
        return [r + 0.5 + diagonal for r in range(world_size)]
    return [world_size / 2 + diagonal] * world_size


def bytes_formula(batch, heads, seq, head_dim, world_size, element_size) -> dict:
    """Bytes each rank sends per attention layer. One K or V shard is E = b·h·(S/P)·d·size bytes.
    Forward: K and V move P-1 times, 2E(P-1). Backward: K, V, dK, dV move P-1 times and dK, dV
    once more to come home, 4E(P-1) + 2E."""
    sharding.check(seq, world_size, "contiguous")
    if world_size == 1:
        return dict(forward=0, backward=0)
    shard = batch * heads * (seq // world_size) * head_dim * element_size
    return dict(forward=2 * shard * (world_size - 1), backward=4 * shard * (world_size - 1) + 2 * shard)


def lse_trap(seq: int = 64, heads: int = 4, head_dim: int = 16, blocks: int = 2,
             dtype=torch.float64, seed: int = 0) -> dict:
    """The CPU trap, in one process: merge key blocks whose (out, lse) come from torch's fused CPU
    op (its logsumexp is not differentiable) and from the course's `block`; errors against
    `attention.reference` (non-causal), forward and gradients of q and k."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, seq, head_dim, generator=g, dtype=dtype).requires_grad_()
               for _ in range(3))
    grad = torch.randn(1, heads, seq, head_dim, generator=g, dtype=dtype)
    ref = A.reference(q, k, v, causal=False)
    want = torch.autograd.grad(ref, (q, k), grad)
    fused = lambda qq, kk, vv: torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(qq, kk, vv)[:2]  # noqa: E731
    result = dict(seq=seq, heads=heads, head_dim=head_dim, blocks=blocks, dtype=str(dtype).split(".")[-1])
    for name, fn in (("fused", fused), ("course", A.block)):
        out, lse = A.empty_state(q)
        for kb, vb in zip(k.chunk(blocks, 2), v.chunk(blocks, 2)):
            block_out, block_lse = fn(q, kb, vb)
            out, lse = A.merge(out, lse, block_out, block_lse)
        got = torch.autograd.grad(out, (q, k), grad)
        result[f"forward_error_{name}"] = (out - ref).abs().max().item()
        result[f"dq_error_{name}"] = (got[0] - want[0]).abs().max().item()
        result[f"dk_error_{name}"] = (got[1] - want[1]).abs().max().item()
        result[f"lse_differentiable_{name}"] = block_lse.requires_grad
    return result
