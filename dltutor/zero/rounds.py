"""Section 4's sweep repeated in rotated rounds: one row per config, its speed over the repeats.

    rows = rows_over_rounds(metrics, ["zero0", "zero1"], nproc=2)   # rank 0's lines, every round
    paired_ratio(rows[1], rows[0])   # row / ref within each round: geometric mean, 95 % interval

`sweep_zero.py --rounds R` runs every config R times, round r in the order rotated by r (odd
rounds in the reverse direction), so a slow minute of a shared machine falls on every config alike.
Each round's run gives one repeat: its steady samples over their time (total samples / total
time of the steps after the meter step, `round_rate`: a throughput, not a mean of per-step
rates). With R >= WARMUP_ROUNDS + 2 the first round is a warm-up and left out of every speed
(its rates stay in `warmup_rates`); a row's `samples_per_s` is the mean of the kept rounds and
`samples_per_s_spread` their 95 % CI (`core.spread.mean_ci`). With one round it stays the
interval over that run's own steps. `repeats` and `repeat_kind` ("rounds" or "steps") say what
the interval was taken over, `steps_per_round` on how many timed steps each round's rate rests.

Compared configs ran in the same round, one after the other: `paired_ratio` divides their rates
round by round and takes the interval over those ratios (on their logarithms, so the ratio's
interval is a geometric mean's: a/b and b/a get mirror intervals). That is the verdict's unit.

Memory (`measured`, the bytes of the tensors a rank holds) is a count, not a timing: the same
model and stage hold the same tensors in every round, so it needs no interval;
`measured_rounds` keeps each round's count so a finding can check that they agree.
"""
from __future__ import annotations

import math

from dltutor.core.spread import mean_ci, ratio_ci
from dltutor.zero.rows import METER_STEPS, row_of

WARMUP_ROUNDS = 1   # round 0 meets cold caches and first-call costs in every config: left out


def round_rate(m: dict) -> float | None:
    """One round's repeat: samples of its steady steps over their total time (None without
    per-step times): the throughput of those steps, not the mean of their rates."""
    steps = m.get("step_s") or []
    steady = [t for t in steps[METER_STEPS:] if t > 0]
    if not m.get("samples_per_s") or not steady:
        return None
    per_step = m["samples_per_s"] * sum(steps) / len(steps)     # samples in one step
    return per_step * len(steady) / sum(steady)


def warmup_rounds(n_rounds: int) -> int:
    """Rounds left out at the start: WARMUP_ROUNDS where at least 2 rounds remain, else none."""
    return WARMUP_ROUNDS if n_rounds >= WARMUP_ROUNDS + 2 else 0


def combine(config: str, runs: list[dict], nproc: int) -> dict:
    """One row from one config's runs (rank 0's metrics, one per round, in round order)."""
    row = row_of(runs[0], config, nproc)
    row["measured_rounds"] = [row_of(m, config, nproc)["measured"] for m in runs]
    steady = [max(0, len(m.get("step_s") or []) - METER_STEPS) for m in runs]
    row["peak_rss_rounds"] = [row_of(m, config, nproc)["peak_rss"] for m in runs]
    if len(runs) < 2:
        row.update(repeats=steady[0], repeat_kind="steps", round_rates=[row["samples_per_s"]],
                   steps_per_round=steady[0], warmup_rates=[])
        return row
    skip = warmup_rounds(len(runs))
    rates = [None] * skip + [round_rate(m) for m in runs[skip:]]
    kept = [r for r in rates if r is not None]
    row.update(repeats=len(kept), repeat_kind="rounds", round_rates=rates,
               warmup_rates=[round_rate(m) for m in runs[:skip]],
               steps_per_round=min(steady[skip:]),
               samples_per_s=sum(kept) / len(kept) if kept else None,
               samples_per_s_spread=mean_ci(kept) if kept else math.nan)
    return row


def rows_over_rounds(metrics, configs, nproc: int) -> list[dict]:
    """Rows in the order of `configs` from every DLTUTOR_METRICS line of rank 0 (all rounds)."""
    mine = [m for m in metrics if m.get("rank", 0) == 0]
    by = {c: sorted((m for m in mine if m.get("config") == c), key=lambda m: m.get("round", 0))
          for c in configs}
    return [combine(c, by[c], nproc) for c in configs if by[c]]


def paired_ratio(row: dict, ref: dict) -> dict | None:
    """row's rate / ref's rate taken round by round (both ran in the same round, one after the
    other, so what the shared machine did in that round largely cancels): the geometric mean of
    the ratios with its 95 % interval (`core.spread.ratio_ci`: the interval of their logarithms, back-transformed).
    Returns dict(ratio, lo, hi, n, log_mean, log_ci), or None with fewer than 2 paired rounds."""
    pairs = [a / b for a, b in zip(row.get("round_rates") or [], ref.get("round_rates") or [])
             if a and b]
    if len(pairs) < 2 or row.get("repeat_kind") != "rounds":
        return None
    ratio, lo, hi = ratio_ci(pairs)             # the interval of the logarithms, back-transformed
    return dict(ratio=ratio, lo=lo, hi=hi, n=len(pairs), log_mean=math.log(ratio),
                log_ci=math.log(hi / ratio))
