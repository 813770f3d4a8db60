"""Set-ups compared in turns, so that a slow minute of a shared machine hits every one of them.

    rotated(["a", "b", "c"], 1)          -> ["b", "c", "a"]
    rotations(["a", "b", "c"], 3)        -> [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    in_turns(["a", "b"], 3, run_one)     -> {"a": [round 0, 1, 2], "b": [...]}: run_one(key, r)

Set-ups timed one after the other meet different machines (another program starts, the clock
drops) and that drift shows up as a difference between them. Round r runs every set-up once, the
order rotated by r, so no set-up is always first or always right after the same other one; each
round gives one value per set-up, and the "±" of a set-up is the 95 % interval over its rounds
(`core.spread.mean_ci`), or of a ratio taken within each round (the round's noise cancels in it).
Used by notebooks 02 (launches), 03 (Horovod set-ups), 04 (ZeRO configs) and 07 (read passes).
"""
from __future__ import annotations


def rotated(keys, r: int) -> list:
    """Round r's order: `keys` rotated left by r."""
    keys = list(keys)
    k = r % len(keys) if keys else 0
    return keys[k:] + keys[:k]


def rotations(keys, rounds: int) -> list[list]:
    """The order of every round: `keys` rotated by the round's number."""
    return [rotated(keys, r) for r in range(rounds)]


def in_turns(keys, rounds: int, run_one) -> dict:
    """Run every key once per round, in `rotations` order: `run_one(key, r)` -> its result.
    Returns {key: [results in round order]} (keys in the order given)."""
    out = {k: [None] * rounds for k in keys}
    for r, order in enumerate(rotations(keys, rounds)):
        for k in order:
            out[k][r] = run_one(k, r)
    return out
