"""Who reads what on N ranks: whole files per rank, or one index list split by DistributedSampler.

    file-level sharding   rank r opens only shards[r::world_size] and reads each front to back
                          (seed 002: `dataset.shard(hvd.size(), hvd.rank())` on a list of files)
    DistributedSampler    every rank sees the whole dataset and takes indices r, r+W, r+2W, ...
                          of one (shuffled) order; N not divisible by W: it repeats a few samples
                          (drop_last=False) so every rank gets the same count

`coverage` checks a split: every sample read, none twice; `balance` shows why file-level
sharding needs equal shards (a rank with fewer samples runs fewer steps, and DDP waits for it).
"""
from __future__ import annotations

from collections import Counter


def shards_for_rank(shards, rank: int, world_size: int) -> list:
    """Rank `rank`'s files: every world_size-th one, starting at `rank`."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    if len(shards) < world_size:
        raise ValueError(f"{len(shards)} shards cannot feed {world_size} ranks: write at least one "
                         "shard per rank (a smaller --per-shard)")
    return list(shards)[rank::world_size]


def sampler_indices(n: int, rank: int, world_size: int, shuffle: bool = False, seed: int = 0,
                    epoch: int = 0, drop_last: bool = False) -> list[int]:
    """The indices torch's DistributedSampler hands rank `rank` of `world_size` in `epoch`."""
    from torch.utils.data.distributed import DistributedSampler
    sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    return list(sampler)


def coverage(per_rank_ids, n: int) -> dict:
    """How a split covered samples 0..n-1: missing, read more than once, samples per rank."""
    counts = Counter(i for ids in per_rank_ids for i in ids)
    return dict(missing=sorted(set(range(n)) - set(counts)),
                repeated=sorted(i for i, c in counts.items() if c > 1),
                per_rank=[len(ids) for ids in per_rank_ids],
                exactly_once=len(counts) == n and all(c == 1 for c in counts.values())
                and set(counts) == set(range(n)))


def balance(per_rank_counts, batch_size: int) -> dict:
    """Steps per rank for these sample counts: unequal steps mean a collective that never returns
    on the longer ranks unless the loop stops at the shortest (min_steps)."""
    steps = [-(-c // batch_size) for c in per_rank_counts]
    return dict(steps=steps, min_steps=min(steps), equal=len(set(steps)) == 1)
