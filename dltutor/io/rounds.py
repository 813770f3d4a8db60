"""Compared read set-ups timed in interleaved, repeated passes, so that a slow minute of a shared
machine hits every set-up, and the "±" of a set-up is the 95 % interval over its passes.

    passes = rounds.interleaved(["a", "b"], 3, lambda cfg, r: one_pass(cfg, seed=r))
    rows = rounds.over_passes(passes)     # one row per set-up: mean samples/s ± (over passes)

Round r runs every set-up once, the order rotated by r (a b c, b c a, c a b, ...), so no set-up is
always first or always last. Each pass records the machine's 1-minute load average
(/proc/loadavg) before and after it. The interval within one pass (from the times between its
batches) is kept as `within_spread_per_s`: batches of one pass share the same minute of the
machine, so it is narrower than the spread between passes, and no verdict uses it.
"""
from __future__ import annotations

import math

from dltutor.core.rounds import rotated
from dltutor.core.spread import mean_ci

NAN = float("nan")


def load_1m() -> float:
    """The machine's 1-minute load average (runnable processes), nan where /proc is absent."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return NAN


def interleaved(configs, rounds: int, run_one) -> list[dict]:
    """`rounds` rounds of every set-up once, in rotated order; run_one(config, round) -> a pass row
    (with samples_per_s). Returns the pass rows, each with config, round and the load average."""
    passes = []
    for r in range(rounds):
        for cfg in rotated(configs, r):
            before = load_1m()
            row = run_one(cfg, r)
            passes.append(dict(row, config=cfg, round=r, load_before=before, load_after=load_1m()))
    return passes


def _state(values) -> str:
    states = list(dict.fromkeys(values))
    return states[0] if len(states) == 1 else "mixed: " + "/".join(states)


def over_passes(passes: list[dict]) -> list[dict]:
    """One row per set-up (first-seen order): the mean samples/s over its passes with the 95 %
    interval over them (`spread_per_s`), the widest within-pass interval (`within_spread_per_s`),
    mean seconds, time to first batch and MB/s, the cache states found before its passes, and the
    load averages seen (`load_min`, `load_max`)."""
    groups: dict = {}
    for p in passes:
        groups.setdefault(p["config"], []).append(p)
    out = []
    for cfg, ps in groups.items():
        rates = [p["samples_per_s"] for p in ps]
        loads = [x for p in ps for x in (p["load_before"], p["load_after"]) if not math.isnan(x)]
        mean = lambda k: sum(p[k] for p in ps) / len(ps)  # noqa: E731
        within = [p.get("spread_per_s", NAN) for p in ps]
        out.append(dict(ps[0], samples_per_s=sum(rates) / len(rates), spread_per_s=mean_ci(rates),
                        within_spread_per_s=max(within) if not any(map(math.isnan, within)) else NAN,
                        pass_rates=rates, pass_spreads=within, passes=len(ps), seconds=mean("seconds"),
                        ttfb_s=mean("ttfb_s"), mb_per_s=mean("mb_per_s"),
                        samples=sum(p["samples"] for p in ps), ids=None,
                        resident_before=mean("resident_before"),
                        cache=_state(p["cache"] for p in ps),
                        load_min=min(loads) if loads else NAN, load_max=max(loads) if loads else NAN,
                        load_1m=f"{min(loads):.1f}-{max(loads):.1f}" if loads else "n/a"))
    return out
