"""Checks of the α-β model that need no fitted α or β: its ratios in the two limits.

For D -> 0 every algorithm's modelled time is its number of messages in sequence times α, for
D -> ∞ its bytes in sequence times β, so the ratio of two algorithms tends to the ratio of those
counts (`cost.coefficients`), whatever α and β are. On 2 ranks: recursive doubling / ring -> 0.5
(1 message against 2) for small D and -> 1 for large D; reduce + broadcast / ring -> 1 for small D
and -> 2 (2·D against D bytes) for large D. These hold even when no fit is usable, so they are
checked against the paired ratio measured at the run's smallest and largest size. Whether those
sizes are far enough out for the limit is itself a property of α and β: a miss says either the
model's counts are wrong here or the size is not yet in the limit; the sentence says both.

- `limit(a, b, n, side)`: the model's ratio a/b for side "small" (D -> 0) or "large" (D -> ∞).
- `limit_findings(summary, pairs)`: one sentence per pair and side, from the measured rows.
"""
from __future__ import annotations

from dltutor.allreduce import cost
from dltutor.allreduce import findings as F
from dltutor.core.units import fmt_bytes

PAIRS = (("recursive_doubling", "ring"), ("reduce_bcast", "ring"))


def limit(a: str, b: str, n: int, side: str) -> float:
    """The modelled ratio a/b for D -> 0 ("small": messages) or D -> ∞ ("large": bytes)."""
    i = 0 if side == "small" else 1
    return cost.coefficients(a, n, 1.0)[i] / cost.coefficients(b, n, 1.0)[i]


def limit_findings(summary: dict, pairs=PAIRS) -> list[str]:
    """Per pair: the measured paired ratio at the smallest and at the largest size against the
    model's α-β-free limit there."""
    n, out = summary["world_size"], []
    for a, b in pairs:
        sizes = sorted({r["bytes"] for r in summary["results"] if r["algorithm"] == a}
                       & {r["bytes"] for r in summary["results"] if r["algorithm"] == b})
        if len(sizes) < 2:
            continue
        for side, d, what in (("small", sizes[0], "messages in sequence"), ("large", sizes[-1], "bytes in sequence")):
            want, r = limit(a, b, n, side), F._ratio(summary, a, b, d)
            head = (f"N = {n}, D = {fmt_bytes(d)}, no α or β needed: for {side} D the model's {a} / {b} tends to "
                    f"{want:.2f}x (the ratio of their {what}); measured {r.geo:.2f}x")
            if not r.n or r.n < 2 or r.hi != r.hi:
                out.append(f"{head}: no interval (fewer than two passes)")
            elif r.excludes(want):
                out.append(f"{head} (95 % CI {r.lo:.2f}-{r.hi:.2f}x over {r.n} paired passes), which excludes "
                           f"{want:.2f}x: either the model's count does not describe {a} against {b} on this "
                           f"machine, or {fmt_bytes(d)} is not yet {side} enough for the limit")
            else:
                out.append(f"{head} (95 % CI {r.lo:.2f}-{r.hi:.2f}x over {r.n} paired passes), which includes "
                           f"{want:.2f}x: consistent with the model's count")
    return out
