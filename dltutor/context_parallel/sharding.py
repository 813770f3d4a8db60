"""Which part of the sequence each rank holds: contiguous or zigzag.

contiguous  rank r holds positions r·S/P … (r+1)·S/P - 1. Simple, but with a causal mask rank r
            attends to r + 1/2 blocks of keys: the last rank works about 2P - 1 times as much as
            the first.
zigzag      the sequence is cut into 2P chunks and rank r holds chunk r and chunk 2P-1-r (one
            from each end), so every rank gets one cheap and one expensive chunk: P/2 blocks each.

`shard` cuts one rank's part out of a whole tensor, `unshard` puts the ranks' parts back in
sequence order, `positions` gives the global positions of one rank's part (what the causal mask
of ring attention is built from).
"""
from __future__ import annotations

import torch

LAYOUTS = ("contiguous", "zigzag")


def check(seq: int, world_size: int, layout: str) -> None:
    """ValueError, one sentence, when `seq` cannot be split over `world_size` ranks in `layout`."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}.")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, not {world_size}.")
    if seq % world_size:
        raise ValueError(f"sequence length {seq} is not divisible by {world_size} ranks: "
                         f"pick a length that is a multiple of {world_size}.")
    if layout == "zigzag" and seq % (2 * world_size):
        raise ValueError(f"zigzag sharding cuts the sequence into 2 x {world_size} = {2 * world_size} "
                         f"chunks and {seq} is not divisible by {2 * world_size}: pick a length "
                         f"that is a multiple of {2 * world_size}.")


def _check_rank(rank: int, world_size: int) -> None:
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1} for {world_size} ranks.")


def chunk_ids(rank: int, world_size: int, layout: str) -> list[int]:
    """The chunks rank `rank` holds: [rank] of P (contiguous), [rank, 2P-1-rank] of 2P (zigzag)."""
    return [rank] if layout == "contiguous" else [rank, 2 * world_size - 1 - rank]


def positions(seq: int, rank: int, world_size: int, layout: str):
    """LongTensor of the global positions, in order, of rank `rank`'s part of the sequence."""
    check(seq, world_size, layout)
    _check_rank(rank, world_size)
    chunks = world_size if layout == "contiguous" else 2 * world_size
    size = seq // chunks
    return torch.cat([torch.arange(c * size, (c + 1) * size) for c in chunk_ids(rank, world_size, layout)])


def shard(x, rank: int, world_size: int, layout: str, dim: int = 2):
    """Rank `rank`'s part of `x` along `dim` (dim 2 of [batch, heads, seq, head_dim])."""
    seq = x.shape[dim]
    check(seq, world_size, layout)
    _check_rank(rank, world_size)
    if layout == "contiguous":
        return x.chunk(world_size, dim=dim)[rank].contiguous()
    chunks = x.chunk(2 * world_size, dim=dim)
    return torch.cat([chunks[c] for c in chunk_ids(rank, world_size, layout)], dim=dim).contiguous()


def unshard(parts, layout: str, dim: int = 2):
    """The whole tensor back from every rank's part (a list in rank order)."""
    world_size = len(parts)
    check(sum(p.shape[dim] for p in parts), world_size, layout)
    if layout == "contiguous":
        return torch.cat(list(parts), dim=dim)
    chunks = [None] * (2 * world_size)
    for rank, part in enumerate(parts):
        first, second = part.chunk(2, dim=dim)
        chunks[rank], chunks[2 * world_size - 1 - rank] = first, second
    return torch.cat(chunks, dim=dim)
