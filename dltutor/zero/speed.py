"""Notebook 04, section 4: the speed findings of the sweep's configs against stage 0.

    speed_findings(rows)          # one verdict per config vs stage 0 (+ offload vs stage 3)

With rounds (`dltutor.zero.rounds`) the verdict is the ratio paired within each round, its
geometric mean and 95 % interval over the rounds; the unpaired means follow as an illustration.
With one round the per-step intervals of the two means are compared (`core.findings.compare`).
An undecided verdict says why from the run's numbers: the effect beside the interval reached and
the rounds (or steps) that would narrow it to the effect.
"""
from __future__ import annotations

import math

from dltutor.core.findings import INCONCLUSIVE, compare, differs, fmt
from dltutor.zero.rounds import paired_ratio


def speed_findings(rows, base: str = "zero0") -> list[str]:
    """Samples/s of every config beside `base`'s. With rounds the verdict is the ratio paired
    within each round (`rounds.paired_ratio`: geometric mean, 95 % interval over the rounds); the
    unpaired means follow as an illustration. With one round (steps) the unpaired comparison of
    the per-step intervals is the verdict; a run without one (nan) decides nothing."""
    ref = next((r for r in rows if r["config"] == base), None)
    if ref is None or not ref.get("samples_per_s"):
        return [f"no {base} run with a speed in these rows: nothing to compare against."]
    out = []
    for r in rows:
        if r is ref or not r.get("samples_per_s"):
            continue
        sa, sb = (math.nan if x.get("samples_per_s_spread") is None else x["samples_per_s_spread"]
                  for x in (r, ref))
        line = compare(r["label"], r["samples_per_s"], ref["label"], ref["samples_per_s"],
                       unit="samples/s", spread_a=sa, spread_b=sb)
        paired = paired_ratio(r, ref)
        if paired is not None:
            out.append(paired_line(r, ref, paired))
            out.append("Unpaired means (an illustration, not the verdict): " + line
                       + unpaired_note(ref, INCONCLUSIVE in line))
            continue
        if math.isnan(sa) or math.isnan(sb):
            line += " (Fewer than 2 steady timed steps in one of the runs.)"
        elif INCONCLUSIVE in line:
            line += " " + why_undecided(r, ref, sa, sb)
        out.append(line)
    by = {r["config"]: r for r in rows}
    if "zero3_offload_cpu" in by and "zero3" in by:
        out += offload_vs_stage3(by["zero3_offload_cpu"], by["zero3"])
    return out


def paired_line(row: dict, ref: dict, p: dict) -> str:
    """THE speed verdict of a config run in rounds: its rate / ref's, paired within each round."""
    n, kind = p["n"], "rounds"
    warm = len(row.get("warmup_rates") or [])
    head = (f"{row['label']} / {ref['label']} = {p['ratio']:.3f} (95 % CI {p['lo']:.3f}-"
            f"{p['hi']:.3f}), geometric mean of the ratios paired within each of {n} {kind}"
            + (f" ({'round 0' if warm == 1 else f'rounds 0-{warm - 1}'} left out as warm-up: "
               f"{row['label']} ran at "
               f"{fmt(row['warmup_rates'][0])} samples/s then, {fmt(row['samples_per_s'])} over "
               f"the rounds kept)" if warm and row["warmup_rates"][0] else "")
            + (f"; each round's rate rests on {row['steps_per_round']} timed step(s)"
               if row.get("steps_per_round") is not None else ""))
    if differs(p["log_mean"], 0.0, p["log_ci"], 0.0):
        return head + f": {row['label']} is {'slower' if p['ratio'] < 1 else 'faster'} than {ref['label']}."
    effect = abs(p["ratio"] - 1)
    reach = max(p["hi"] - 1, 1 - p["lo"])
    need = math.ceil(n * (p["log_ci"] / abs(p["log_mean"])) ** 2) if p["log_mean"] else None
    why = (f"Why: the effect is {100 * effect:.1f} % of {ref['label']}'s rate, the interval reaches "
           f"{100 * reach:.1f} % from 1 over {n} {kind}")
    why += (f"; narrowing it to the effect would take about {need:,} {kind} "
            f"({need / n:.1f}x this run), if the machine's noise stayed as it was."
            if need else "; no gap at all: more rounds would not decide it.")
    return head + f": {INCONCLUSIVE}, the interval holds 1. " + why


def unpaired_note(ref: dict, undecided: bool) -> str:
    """Why the unpaired means can fail where the paired ratio decides: the rounds' own spread."""
    rates = [x for x in ref.get("round_rates") or [] if x]
    if not undecided or len(rates) < 2:
        return ""
    return (f" The unpaired means cannot show it because {ref['label']}'s own rounds spread "
            f"{max(rates) / min(rates):.1f}x ({fmt(min(rates))}-{fmt(max(rates))} samples/s), "
            f"a swing the ratio within each round removes.")


def offload_vs_stage3(off: dict, z3: dict) -> list[str]:
    """Stage 3 + CPU offload against stage 3 itself, paired by round where it can be."""
    p = paired_ratio(off, z3)
    if p is None:
        return []
    return [paired_line(off, z3, p) + " On a CPU-only machine host and device are the same RAM, "
            "so no copy cost is measured here, and offload also swaps torch's Adam for "
            "DeepSpeedCPUAdam: the ratio mixes both."]


def why_undecided(row: dict, ref: dict, spread: float, spread_ref: float) -> str:
    """Why a speed gap stayed inside the intervals, from the run's numbers: the gap and the combined
    interval as shares of the reference's rate, and how many repeats would narrow the interval to
    the gap (a 95 % interval shrinks as 1/sqrt(repeats))."""
    base = ref["samples_per_s"]
    gap, both = abs(row["samples_per_s"] - base), math.hypot(spread, spread_ref)
    n = min(row.get("repeats") or 0, ref.get("repeats") or 0)
    kind = row.get("repeat_kind") or "steps"
    head = (f"Why: the gap is {100 * gap / base:.1f} % of {ref['label']}'s rate, the interval "
            f"reached is ±{100 * both / base:.1f} %" + (f" over {n} {kind}" if n else ""))
    if not n or gap == 0:
        return head + "; a gap this small cannot be resolved by this run."
    need = math.ceil(n * (both / gap) ** 2)
    return (head + f"; narrowing it to the gap would take about {need:,} {kind} "
            f"({need / n:.1f}x this run), if the machine's noise stayed as it was.")
