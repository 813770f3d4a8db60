"""Two set-ups launched in the same rounds, compared round by round (the round is the unit).

    r = ratio(hvd_rounds, ddp_rounds)      # {round: img/s} each -> per-round ratios, their mean
    r["ratios"], r["mean"], r["lo"], r["hi"], r["n"], r["above"]
    decided(r)                              # the 95 % interval excludes 1
    rounds_needed(r)                        # rounds that would decide a ratio this size, if real
    text(r)                                 # '1.83x (95 % CI 1.27-2.62, paired by round, 3 rounds)'

Iterations inside one launch move together (the launch's load, its memory layout), so pooling
them over launches gives an interval that is too narrow; launches of one set-up made minutes
apart differ by the machine's drift. Inside one round the set-ups ran minutes apart under about
the same load, so the ratio of their rates in that round cancels much of the drift. The verdict's
interval is over those per-round ratios: a Student-t interval of the mean of their logarithms
(`core.spread.ratio_ci`), turned back into a ratio, so it is not symmetric (n = rounds, few).
"""
from __future__ import annotations

import math

from dltutor.core.spread import ratio_ci


def per_round(rows: list[dict], key: str = "total_img_sec") -> dict:
    """{round: value of `key`} of one set-up's launches (a row without a round: its position)."""
    return {int(r.get("round") or i + 1): float(r[key]) for i, r in enumerate(rows)}


def ratio(a: dict, b: dict) -> dict:
    """a/b in every round both ran ({round: value} each); mean and 95 % CI over those rounds."""
    common = sorted(set(a) & set(b))
    ratios = [a[k] / b[k] for k in common]
    mid, lo, hi = ratio_ci(ratios)
    half = math.log(hi / mid) if len(ratios) > 1 else math.nan
    return {"rounds": common, "ratios": ratios, "n": len(ratios), "mean": mid, "lo": lo, "hi": hi,
            "above": sum(x > 1 for x in ratios), "log_half": half}


def decided(r: dict) -> bool:
    """Whether the ratio's 95 % interval excludes 1 (no interval below two rounds: never)."""
    return not math.isnan(r["log_half"]) and (r["lo"] > 1 or r["hi"] < 1)


def rounds_needed(r: dict) -> int | None:
    """About how many rounds would give an interval that excludes 1 for a ratio this size with
    this round-to-round spread (the interval narrows as t(n-1)/sqrt(n)); None: no spread or no gap."""
    from scipy import stats
    n, mid = r["n"], abs(math.log(r["mean"])) if r["n"] else 0.0
    if n < 2 or math.isnan(r["log_half"]) or mid < 1e-9:
        return None
    sd = r["log_half"] * math.sqrt(n) / stats.t.ppf(0.975, n - 1)
    for m in range(2, 1000):
        if stats.t.ppf(0.975, m - 1) * sd / math.sqrt(m) < mid:
            return m
    return None


def text(r: dict) -> str:
    """'1.83x (95 % CI 1.27-2.62, paired by round, 3 rounds)'; without an interval, says so."""
    if r["n"] < 2:
        return f"{r['mean']:.2f}x (one round: no interval)"
    return f"{r['mean']:.2f}x (95 % CI {r['lo']:.2f}-{r['hi']:.2f}, paired by round, {r['n']} rounds)"


def listed(r: dict) -> str:
    """The per-round ratios: '1.62, 2.14, 1.75'."""
    return ", ".join(f"{x:.2f}" for x in r["ratios"])


def why_not(r: dict, what: str = "the ratio") -> str:
    """Why a ratio was not decided, from the numbers."""
    if r["n"] < 2:
        return "one round gives no interval: nothing can be decided (full mode runs several rounds)."
    need = rounds_needed(r)
    more = (f"about {need} rounds (not {r['n']}) would decide {what} of this size with this "
            f"round-to-round spread, if it is real" if need else "no gap to resolve")
    return f"the interval holds 1; {more}."


def step_ratio(value_rows: list[dict], lab_rows: list[dict]) -> dict:
    """Step time of a set-up over the lab's, paired by round: the rates' inverse ratio, so the
    step time and img/s come from one estimator (step = workers x batch / total img/s)."""
    return ratio(per_round(lab_rows), per_round(value_rows))


def step_from_rate(row: dict) -> float:
    """Seconds per step of a launch from its total img/s: workers x batch / total."""
    return row["workers"] * row["batch_size"] / row["total_img_sec"]
