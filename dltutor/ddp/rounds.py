"""Launches of lab 02 in rotated rounds, so that a slow minute of a shared machine hits every set-up.

    order = rotations(["1 rank", "2 ranks", "1 rank, 2b"], rounds=3)
    # [["1 rank", "2 ranks", "1 rank, 2b"], ["2 ranks", "1 rank, 2b", "1 rank"], ["1 rank, 2b", ...]]
    runs = interleave(keys, rounds, launch_one)   # {key: [result of round 0, round 1, ...]}

Set-ups timed one after the other meet different machines (another program starts, the clock
drops) and that drift shows up as a difference between them. Timed in turns, round r launches every
set-up once, the order rotated by r, so a set-up is neither always first nor always after the same
other one. Each round gives one value per set-up (its img/s, its mean step time); the "±" is the
95 % confidence interval of the mean over the rounds (`core.spread.mean_ci`). A ratio of two set-ups
(an efficiency) is taken within each round first, so the noise a round shares cancels in it.

* `scaling_rows(runs, summarize, *weak_and_strong(b))`: the scaling table's rows, each rate and efficiency with the mean
  and the 95 % CI over rounds (`efficiency_spread`, `speedup` per round too).
* `step_rows(runs, labels, step_row)`: one row per bucket variant, mean step time over rounds.
* `rounds_needed(gap, halfwidth, rounds)`: how many rounds would make an interval this wide
  exclude this gap (the interval shrinks as 1/sqrt(rounds)): the "why" of an inconclusive verdict.
"""
from __future__ import annotations

import math

from dltutor.core import spread as ci
from dltutor.core.findings import INCONCLUSIVE
from dltutor.core.rounds import in_turns, rotations  # noqa: F401  (rotations: the order shown)


interleave = in_turns   # lab 02's launches, each key once per round in `rotations` order


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def scaling_rows(runs: dict, summarize, kind_of, base_of) -> list[dict]:
    """Rows for the scaling table from {(ranks, per_rank_batch): [launch results per round]}.

    `summarize(metrics)` makes one launch's row; `kind_of(key)` lists the scaling families a key
    belongs to ("weak", "strong"); `base_of(key, kind)` the key it is compared with in that family
    (itself for the base). The rate is the mean over rounds of each round's global img/s, its ±
    the 95 % CI over rounds; the efficiency is P / (P_base x scale) taken within each round, then
    averaged, with its 95 % CI over rounds (`efficiency_spread`)."""
    rows = []
    for key, results in runs.items():
        per = [summarize(res.metrics) for res in results]
        rates = [p["global_img_per_s"] for p in per]
        for kind in kind_of(key):
            base = base_of(key, kind)
            base_rates = [summarize(res.metrics)["global_img_per_s"] for res in runs[base]]
            scale = per[0]["world_size"] / base[0]
            speed = [a / b for a, b in zip(rates, base_rates)]
            eff = [s / scale for s in speed]
            rows.append({**per[0], "scaling": kind, "global_img_per_s": mean(rates),
                         "rate_spread": ci.mean_ci(rates), "rates": rates, "rounds": len(rates),
                         "speedup": mean(speed), "efficiency": mean(eff),
                         "efficiency_spread": ci.mean_ci(eff) if key != base else 0.0,
                         "efficiencies": eff, "step_time_ms": mean(p["step_time_ms"] for p in per)})
    return rows


def step_rows(runs: dict, labels: dict, step_row) -> list[dict]:
    """One row per variant from {key: [launch results per round]}: `step_row(label, metrics)` per
    round, then the mean step time over rounds and its 95 % CI over rounds (`spread_ms`)."""
    rows = []
    for key, results in runs.items():
        per = [step_row(labels[key], res.metrics) for res in results]
        times = [p["step_time_ms"] for p in per]
        rows.append({**per[0], "step_time_ms": mean(times), "spread_ms": ci.mean_ci(times),
                     "round_times_ms": times, "rounds": len(times),
                     "timed_steps": sum(p["timed_steps"] for p in per),
                     # from the same per-round times as step_time_ms (a mean of rates would disagree)
                     "global_img_per_s": 1e3 * per[0]["global_batch"] / mean(times)})
    return rows


def with_ratios(rows: list[dict], ref: str) -> list[dict]:
    """`step_rows` with each variant's step time over `ref`'s taken within each round
    (`ratio_to_ref`, the mean over rounds) and its 95 % CI over the rounds (`ratio_spread`): the
    interval the verdict uses (`paired`)."""
    base = next(r["round_times_ms"] for r in rows if r["label"] == ref)
    out = []
    for r in rows:
        ratio = [a / b for a, b in zip(r["round_times_ms"], base)]
        out.append({**r, "round_ratios": ratio, "ratio_to_ref": mean(ratio),
                    "ratio_spread": 0.0 if r["label"] == ref else ci.mean_ci(ratio)})
    return out


def rounds_needed(gap: float, halfwidth: float, rounds: int, level: float = ci.LEVEL) -> int | None:
    """Rounds (or seeds) that would shrink an interval of `halfwidth` (reached with `rounds`) below
    |gap|, if the spread of one round stays as it was: the sd is recovered from the interval, and
    the Student-t quantile is taken at each new count (a fixed small-sample quantile overstates the
    need several times). None when there is no interval or no gap."""
    if not ci.decided(halfwidth) or gap == 0 or rounds < 2:
        return None
    from scipy import stats
    q = lambda n: stats.t.ppf((1 + level) / 2, n - 1)
    sd = halfwidth * math.sqrt(rounds) / q(rounds)
    n = max(rounds + 1, math.ceil((stats.norm.ppf((1 + level) / 2) * sd / abs(gap)) ** 2))
    while q(n) * sd / math.sqrt(n) >= abs(gap):
        n += 1
    return n


def why_undecided(gap: float, halfwidth: float, rounds: int, unit: str = "") -> str:
    """'the gap is 3.1 ms, the interval ±5.2 ms after 5 rounds: about 15 rounds would decide a gap
    this size' (or why no interval exists), from the run's numbers."""
    if not ci.decided(halfwidth):
        return f"{rounds} round{'s' if rounds != 1 else ''} give no interval over rounds"
    need = rounds_needed(gap, halfwidth, rounds)
    head = (f"the gap is {abs(gap):.3g}{unit}, the 95 % interval ±{halfwidth:.3g}{unit} after "
            f"{rounds} round{'s' if rounds != 1 else ''}")
    return head + ("" if need is None else f": about {need} rounds would decide a gap this size "
                   "(if one round stays as noisy; t quantile at the new count)")


def weak_and_strong(b: int):
    """`(kind_of, base_of)` for `scaling_rows` with keys (ranks, per-rank batch, width...): weak
    scaling keeps b (base: 1 rank x b), strong keeps the global batch 2b (base: 1 rank x 2b)."""
    def kind_of(key):
        return [k for k, ok in (("weak", key[1] == b), ("strong", key[0] * key[1] == 2 * b)) if ok]

    def base_of(key, kind):
        return (1, b if kind == "weak" else 2 * b, *key[2:])
    return kind_of, base_of


def paired(rows: list[dict], ref: str) -> list[str]:
    """Each variant's step time relative to the `ref` variant's, taken within each round (the
    machine's pace in a round hits both), then the mean over rounds and its 95 % CI: faster or
    slower where the interval excludes 1, else inconclusive with the per-round ratios (the pace
    changed within a round by more than the gap: that, not the rounds' count alone, rules out a
    verdict) and the rounds that would decide if it stayed as noisy."""
    by = {r["label"]: r for r in rows}
    if ref not in by or min(len(r.get("round_times_ms") or ()) for r in rows) < 2:
        return []
    parts = []
    for r in with_ratios(rows, ref):
        if r["label"] == ref:
            continue
        ratio, m, h = r["round_ratios"], r["ratio_to_ref"], r["ratio_spread"]
        head = f"{r['label']} {m:.2f}x ± {h:.2f}"
        if abs(m - 1) > h:
            parts.append(f"{head}, {'slower' if m > 1 else 'faster'} beyond its 95 % CI")
        else:
            each = ", ".join(f"{x:.2f}" for x in ratio)
            parts.append(f"{head}, {INCONCLUSIVE} (per round {each}: the ratio moved from round to round by "
                         f"more than the gap, the load changed within rounds; {why_undecided(m - 1, h, len(ratio))})")
    return [f"Paired within rounds (each variant's step time over {ref}'s in the same round, mean over "
            f"{len(by[ref]['round_times_ms'])} rounds, ± its 95 % CI over the rounds; this is the "
            "verdict): " + "; ".join(parts) + "."]


def balance_note(n_setups: int, rounds: int) -> str:
    """Whether the rotation is balanced: with a multiple of `n_setups` rounds every set-up runs in
    every position (first, second, ...) equally often; otherwise some set-up more often first or
    right after the same other one, and that order can tilt a ratio taken within a round."""
    if rounds < 2:
        return "one round: nothing rotated, the order of the launches is not balanced."
    if rounds % n_setups == 0:
        return (f"{rounds} rounds of {n_setups} set-ups: balanced, every set-up ran in every position "
                f"{rounds // n_setups} time(s).")
    return (f"{rounds} rounds of {n_setups} set-ups: NOT balanced ({rounds} is not a multiple of "
            f"{n_setups}), so some set-up ran first, or right after the same other one, more often than "
            "the others; a ratio within rounds can carry that order.")


ROUNDS_NOTE = ("± over rounds is the 95 % confidence interval of the mean over the rounds: each round "
               "launches every set-up once, so what changes between launches (another program starting "
               "on the shared machine) is inside it. Rounds that met a different load are not draws from "
               "one distribution, so read a wide ± as 'the load moved', not as a precise spread. A ratio "
               "taken within each round (an efficiency, a step time over another's) cancels the load a "
               "round shares; two values differ when the interval of that ratio leaves out its line "
               "(1.0, 1/W); otherwise the finding says \"inconclusive here\".")


def load_avg() -> float:
    """The machine's 1-minute load average (how many processes wanted a core), nan where unknown."""
    import os
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return math.nan


def with_load(run_one, log: list):
    """`run_one(key, r)` that also notes the 1-minute load before and after each launch in `log`
    as (key, round, before, after): printed with the table, so the contention is disclosed."""
    def run(key, r=0):
        before = load_avg()
        res = run_one(key, r)
        log.append((key, r, before, load_avg()))
        return res
    return run


def load_lines(log: list, cores: int) -> str:
    """One line per launch: its 1-minute load before -> after, against the cores."""
    return (f"1-minute load average (this machine: {cores} cores) before -> after each launch: " +
            "; ".join(f"round {r} {k}: {a:.1f} -> {b:.1f}" for k, r, a, b in log) + ".")
