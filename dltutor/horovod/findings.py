"""What notebook 03's runs showed, as sentences built from their numbers (dltutor.core.findings).

    scaling(rows)            this run's 1- and 2-worker launches (one pair, not in turns: no
                             verdict) and the efficiency beside seed 001's (a reference)
    engines(hvd_rows, ddp)   Horovod vs DDP: launched in rounds, their img/s ratio paired by round
                             (`paired`) with its 95 % interval over the rounds
    sweep(name, points)      single runs of one Horovod setting: which gave the shortest step
    sweeps_by_round(p, l)    both sweeps launched in rounds: each value over the lab's, paired by round
    rerun(row, lab_pool)     the scaling section's lab-settings launch beside the rounds' ones
    timeline(totals, wall)   where rank 0's timeline spent its time: wall-clock shares (`wall`), sums
                             over overlapping tensors named as such; what a negotiation span holds
    findings(...)            all of them, for the summary cell before the key takeaways

A single launch's spread ("±") is the 95 % CI of its mean total img/s over its timed iterations
(`runs.iteration_ci`): how precisely that launch pins its own mean, not how far a repeat can move.
Set-ups launched in rounds are compared by a ratio taken within each round, its interval over the
rounds (`paired.ratio`): the round, not the iteration, is the unit. No interval, no verdict.
"""
from __future__ import annotations

import math

from dltutor.core import env
from dltutor.core.spread import combined
from dltutor.core.findings import INCONCLUSIVE, compare, differs, fmt, trend
from dltutor.ddp.scaling import weak_efficiency
from dltutor.horovod import paired
from dltutor.horovod.runs import SEED_1GPU_TOTAL, SEED_2GPU_TOTAL

SEED_EFFICIENCY = weak_efficiency(SEED_2GPU_TOTAL, SEED_1GPU_TOTAL, 2)   # 0.968
SEED_SOURCE = "seed 001 (2 nodes x 1 V100, mpirun_rsh; a REFERENCE, not measured here)"


def total_spread(row: dict) -> float:
    """± of a row's total img/s: the 95 % CI of its mean over the timed iterations (nan: none)."""
    h = row.get("total_img_sec_ci")
    return math.nan if h is None else float(h)


def load_note(rows) -> str:
    """' (1-minute load average L1 at the 1-worker launch, L2 at the 2-worker one)' when recorded."""
    loads = [(r["workers"], r.get("load_1m")) for r in rows]
    if any(v is None for _, v in loads):
        return ""
    return " (1-minute load average " + ", ".join(
        f"{v:.1f} at the {n}-worker launch" for n, v in loads) + ")"


def scaling(rows: list[dict]) -> list[str]:
    """Sentences on one engine's scaling rows (fewest workers first is the base). Each row is ONE
    launch, launched one after the other, not in turns: the gap between them holds the machine's
    drift, which no launch's own interval covers, so no verdict is drawn from them."""
    rows = sorted(rows, key=lambda r: r["workers"])
    base, out = rows[0], []
    if env.fast_mode():
        out.append("FAST MODE: tiny images and a few timed steps, so compute is small and the "
                   "all-reduce weighs far more than at full size; read the method, not the digits.")
    for r in rows[1:]:
        n, n0 = r["workers"], base["workers"]
        eff = weak_efficiency(r["total_img_sec"], base["total_img_sec"], n / n0)
        out.append(f"{n} workers {fmt(r['total_img_sec'], 'img/s')} in total vs {n0} worker"
                   f"{'s' * (n0 > 1)} {fmt(base['total_img_sec'], 'img/s')}: {r['total_img_sec'] / base['total_img_sec']:.2f}x, "
                   f"{INCONCLUSIVE}: one launch each, one after the other and not in turns"
                   f"{load_note([base, r])}, so the gap also holds how the machine's load moved "
                   f"between them; each launch's ± (±{fmt(total_spread(r))} and "
                   f"±{fmt(total_spread(base))}, over its own iterations) does not cover that.")
        out.append(f"scaling efficiency on {n} workers: {eff:.2f} measured here, from that one pair "
                   f"(no 95 % interval); {SEED_SOURCE} gives {SEED_EFFICIENCY:.2f}: shown beside it as "
                   "a reference from other hardware, not tested against it.")
    return out


def engines(hvd_rows: list[dict], ddp_rows: list[dict]) -> list[str]:
    """Horovod vs DDP at each worker count both engines ran. Pooled rows (`rounds.pooled`: launches
    in rotated rounds) are compared round by round (`paired`); single rows by their intervals."""
    out = []
    for d in sorted(ddp_rows, key=lambda r: r["workers"]):
        h = next((r for r in hvd_rows if r["workers"] == d["workers"]), None)
        if h is None:
            continue
        if "round_img_sec" in h and "round_img_sec" in d:
            out.append(f"{d['workers']} workers: " + by_round(h, d))
            continue
        a, b, sa, sb = h["total_img_sec"], d["total_img_sec"], total_spread(h), total_spread(d)
        text = f"{d['workers']} workers: " + compare("Horovod", a, "DDP", b, unit="img/s",
                                                     spread_a=sa, spread_b=sb)
        if not differs(a, b, sa, sb):
            text += " " + short_by(a, b, combined(sa, sb))
        out.append(text)
    return out


def by_round(h: dict, d: dict) -> str:
    """Horovod / DDP img/s paired within each round, its 95 % interval over the rounds."""
    r = paired.ratio(h["round_img_sec"], d["round_img_sec"])
    head = (f"Horovod {fmt(h['total_img_sec'], 'img/s')} vs DDP {fmt(d['total_img_sec'], 'img/s')} "
            f"(means over {r['n']} launch{'es' * (r['n'] > 1)} each); Horovod / DDP in each round: "
            f"{paired.listed(r)}")
    if paired.decided(r):
        word = "faster" if r["mean"] > 1 else "slower"
        return (f"{head}: Horovod {word} than DDP in {r['above'] if r['mean'] > 1 else r['n'] - r['above']} "
                f"of {r['n']} rounds, {paired.text(r)}.")
    return f"{head}: {paired.text(r)}, {INCONCLUSIVE}: {paired.why_not(r, 'a ratio')}"


def short_by(a: float, b: float, halfwidth: float) -> str:
    """Why a gap was not decided, from the numbers: the gap and the combined interval as shares of
    their mean."""
    if math.isnan(halfwidth):
        return ""
    mean = (a + b) / 2
    gap = abs(a - b)
    head = f"The gap is {gap / mean:.1%} of their mean, the combined interval ±{halfwidth / mean:.1%}"
    if gap <= 0.01 * halfwidth:
        return head + ": no gap to resolve on this machine."
    return head + ": more launches, in turns, would be needed to tell a gap this size apart here."


def sweep(name: str, points, label=lambda v: f"{v:g}", iterations=None) -> list[str]:
    """Sentences on a `runs.sweep_setting` or `rounds.sweep_points` result [(value, s/step, spread,
    run)]: lower is better. `iterations`: timed iterations behind each point (for `short_by`)."""
    pts = sorted(points)
    ms = [1000 * p[1] for p in pts]
    spreads = [1000 * p[2] for p in pts]
    if len(pts) < 2:
        return [f"{name}: one value measured ({label(pts[0][0])}, {fmt(ms[0], 'ms')} per step); "
                "nothing to rank."] if pts else []
    out = [trend("Horovod's time per step", [label(p[0]) for p in pts], ms, x_name=name,
                 unit="ms", spreads=spreads)]
    best = min(range(len(pts)), key=lambda i: ms[i])
    ties = [label(pts[i][0]) for i in range(len(pts))
            if i != best and not differs(ms[best], ms[i], spreads[best], spreads[i])]
    head = f"{name}={label(pts[best][0])} gave the shortest step ({fmt(ms[best], 'ms')} ±{fmt(spreads[best])})"
    if ties:
        near = min((i for i in range(len(pts)) if label(pts[i][0]) in ties), key=lambda i: ms[i])
        why = short_by(ms[best], ms[near], combined(spreads[best], spreads[near]))
        out.append(f"{head}, but {', '.join(ties)} {'is' if len(ties) == 1 else 'are'} inside the "
                   f"spreads: which setting is best is {INCONCLUSIVE}."
                   + (f" Against the closest, {label(pts[near][0])}, t{why[1:]}" if why else ""))
    else:
        out.append(f"{head}, shorter than every other value beyond the spreads.")
    return out


NEGOTIATION_IS_WAITING = (
    "A negotiation span runs from rank 0 noting a tensor ready to Horovod starting its all-reduce: "
    "it holds the wait for the other workers to report it (skew, e.g. one still in its backward), "
    "the wait for the next background cycle (up to HOROVOD_CYCLE_TIME), the request/response round "
    "trip, and queueing behind earlier all-reduces; on a loaded machine, scheduling delay adds to "
    "each. The timeline does not split it into these parts.")


def timeline(totals: dict, wall: dict | None = None) -> list[str]:
    """Where rank 0's Horovod timeline spent its time: with `wall` (`plots.phase_wall`), the
    wall-clock time some tensor spent in each phase, as a share of the time traced; `totals`
    (`plots.phase_totals`) are sums over tensors whose spans overlap, reported as such, no shares."""
    top = {k: v for k, v in totals.items() if k in ("negotiation", "all-reduce")}
    if not top:
        return ["The timeline holds no negotiation or all-reduce span (too few steps were traced)."]
    out = []
    traced = (wall or {}).get("traced") or 0
    if traced > 0:
        out.append(f"Rank 0's timeline covers {fmt(traced, 'ms')}; some tensor was " + " and some ".join(
            f"{'in negotiation' if k == 'negotiation' else 'in an all-reduce'} during "
            f"{fmt(wall.get(k, 0.0), 'ms')} of it ({wall.get(k, 0.0) / traced:.0%})" for k in top)
            + " (wall-clock: the union of the tensors' spans).")
    summed = ", ".join(f"{k} {fmt(v, 'ms')}" for k, v in sorted(top.items(), key=lambda kv: -kv[1]))
    more = traced > 0 and max(top.values()) > traced
    out.append(f"Summed over tensors, whose spans overlap, the same phases add up to {summed}"
               + (": more than the time traced, so these sums are not shares of the run." if more else
                  ": overlapping time counts once per tensor, so these sums are not shares of the run."))
    inner = {k: v for k, v in totals.items() if k not in top}
    if inner:
        k, v = max(inner.items(), key=lambda kv: kv[1])
        out[-1] += f" Inside the operations, {k} took the most ({fmt(v, 'ms')}, summed the same way)."
    if "negotiation" in top:
        out.append(NEGOTIATION_IS_WAITING)
    return out


def sweeps(fusion, cycle, iterations=None) -> list[str]:
    """Both sweeps of notebook 03 from single runs: fusion threshold (labelled in MiB) and cycle time (ms)."""
    from dltutor.horovod.plots import fusion_label
    return (sweep("HOROVOD_FUSION_THRESHOLD", fusion, lambda v: fusion_label(int(v)), iterations)
            + sweep("HOROVOD_CYCLE_TIME", cycle, lambda v: f"{v:g} ms", iterations))


def sweep_by_round(name: str, ratios: list[tuple[float, dict]], lab_value: float, label) -> str:
    """One sentence on a sweep launched in rounds: each value's step time over the lab's value's,
    paired by round (`paired.step_ratio`), and which of them are decided."""
    if not ratios:
        return f"{name}: only the lab's value ({label(lab_value)}) was launched; nothing to compare."
    parts = [f"{label(v)} {paired.text(r)}" for v, r in ratios]
    head = (f"{name}, step time over the lab's {label(lab_value)} in the same round (< 1: a shorter "
            f"step): " + "; ".join(parts))
    told = [(v, r) for v, r in ratios if paired.decided(r)]
    if all(r["n"] < 2 for _, r in ratios):
        return f"{head}. {INCONCLUSIVE.capitalize()}: {paired.why_not(ratios[0][1])}"
    if not told:
        v, r = max(ratios, key=lambda vr: abs(math.log(vr[1]["mean"])))
        return (f"{head}. Every interval holds 1: which value is best is {INCONCLUSIVE}; for the "
                f"largest of these ratios ({label(v)}), {paired.why_not(r)}")
    said = "; ".join(f"{label(v)} gave a {'shorter' if r['mean'] < 1 else 'longer'} step than "
                     f"{label(lab_value)}" for v, r in told)
    rest = [label(v) for v, r in ratios if not paired.decided(r)]
    return f"{head}. Decided: {said}" + (f"; {', '.join(rest)}: {INCONCLUSIVE}." if rest else ".")


def sweeps_by_round(pools: dict, launches: dict) -> list[str]:
    """Both sweeps of notebook 03 from `rounds.in_rounds` launches (`pools`: `rounds.pool_all`)."""
    from dltutor.horovod import rounds
    from dltutor.horovod.plots import fusion_label
    return [sweep_by_round(name, rounds.sweep_ratios(pools, launches, key), lab, label)
            for name, key, label in (("HOROVOD_FUSION_THRESHOLD", "fusion_threshold_bytes",
                                      lambda v: fusion_label(int(v))),
                                     ("HOROVOD_CYCLE_TIME", "cycle_time_ms", lambda v: f"{v:g} ms"))
            for lab in [float(pools[rounds.LAB][key])]]


def rerun(scaling_row: dict, lab_pool: dict) -> list[str]:
    """The scaling section's launch with the lab's settings beside the rounds' lab-setting
    launches: similar settings, different times (and sizes: named), one look at run-to-run noise."""
    means = lab_pool["launch_means"]
    inside = min(means) <= scaling_row["total_img_sec"] <= max(means)
    spread = (f" Launches of one set-up differ from each other by {max(means) / min(means):.2f}x "
              "(largest over smallest), which an interval over one launch's iterations does not hold: "
              "that is why the verdicts above pair set-ups within a round." if len(means) > 1 else
              " With one launch per set-up, how far whole launches move is not seen here.")
    return [f"The {scaling_row['workers']}-worker launch of the scaling section (lab settings, "
            f"timeline on, its own warm-up and iteration sizes) gave {fmt(scaling_row['total_img_sec'], 'img/s')} "
            f"±{fmt(total_spread(scaling_row))} over its iterations; the rounds' launches with the lab's "
            f"settings gave " + ", ".join(fmt(v) for v in means) + " img/s: "
            + ("inside their range." if inside and len(means) > 1 else
               "outside their range." if len(means) > 1 else f"{scaling_row['total_img_sec'] / means[0]:.2f}x apart.")
            + spread]


def findings(scaling_rows, hvd_rows, ddp_rows, fusion, cycle, totals, wall=None,
             iterations=None, pools=None, launches=None) -> list[str]:
    """All of notebook 03's findings, in the order of its sections (`pools` and `launches`: the
    rounds', whose sweeps are then compared round by round)."""
    swept = (sweeps_by_round(pools, launches) if pools is not None and launches is not None
             else sweeps(fusion, cycle, iterations))
    return scaling(scaling_rows) + engines(hvd_rows, ddp_rows) + swept + timeline(totals, wall)
