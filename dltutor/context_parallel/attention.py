"""Attention written out, one block at a time, and the online-softmax rule that merges blocks.

For one query row, attention over keys split into blocks A and B is

    out = softmax(s) @ v    with s = q kᵀ / √d over all keys,

and each block alone gives (out_A, lse_A) with lse_A = log Σ_{j∈A} exp(s_j). Because
softmax over A∪B weighs block A by exp(lse_A - lse) with lse = log(exp(lse_A) + exp(lse_B)),

    out = exp(lse_A - lse) · out_A + exp(lse_B - lse) · out_B.

That is the whole trick of ring attention (and of FlashAttention inside one GPU): keep a running
(out, lse), and each new block rescales what was there. A row that has seen no key yet has
lse = -inf and out = 0; `block` and `merge` keep such rows at exactly that, without nan, in the
forward pass and in the gradients.
"""
from __future__ import annotations

import math

import torch


def scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def causal_allowed(q_positions, k_positions):
    """[len(q), len(k)] bool: True where the key's global position is not after the query's."""
    return k_positions[None, :] <= q_positions[:, None]


def reference(q, k, v, causal: bool):
    """One process, whole sequence: softmax(QKᵀ/√d) V, the causal mask from positions 0..S-1."""
    scores = q @ k.transpose(-2, -1) * scale(q.shape[-1])
    if causal:
        pos = torch.arange(q.shape[-2], device=q.device)
        scores = scores.masked_fill(~causal_allowed(pos, pos), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _finite_or_zero(x):
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


def block(q, k, v, mask=None):
    """Attention of q over one block of keys: (out, lse), both differentiable.

    mask: optional bool [s_q, s_k], True = the query may see the key. lse [b, h, s_q] is
    log Σ_j exp(s_j) over the allowed keys; -inf (and out = 0) for a row that sees none.
    """
    scores = q @ k.transpose(-2, -1) * scale(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    row_max = _finite_or_zero(scores.amax(dim=-1)).detach()  # any shift gives the same result
    e = torch.exp(scores - row_max[..., None])
    total = e.sum(dim=-1)
    seen = total > 0
    total = torch.where(seen, total, torch.ones_like(total))
    out = (e / total[..., None]) @ v
    lse = torch.where(seen, row_max + torch.log(total), torch.full_like(total, float("-inf")))
    return out, lse


def merge(out, lse, block_out, block_lse):
    """The online-softmax merge of a running (out, lse) with one more block's (out, lse)."""
    shift = _finite_or_zero(torch.maximum(lse, block_lse)).detach()
    a, b = torch.exp(lse - shift), torch.exp(block_lse - shift)
    total = a + b
    seen = total > 0
    total = torch.where(seen, total, torch.ones_like(total))
    merged = (a / total)[..., None] * out + (b / total)[..., None] * block_out
    merged_lse = torch.where(seen, shift + torch.log(total), torch.full_like(total, float("-inf")))
    return merged, merged_lse


def empty_state(q):
    """The running (out, lse) before any block: out = 0, lse = -inf."""
    return torch.zeros_like(q), torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
