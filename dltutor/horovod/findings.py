"""What notebook 03's runs showed, as sentences built from their numbers (dltutor.core.findings).

    scaling(rows)            speed-up and efficiency of this run, beside seed 001's (a reference)
    engines(hvd_rows, ddp)   Horovod vs DDP on the same work, or "inconclusive here"
    sweep(name, points)      which value of one Horovod setting gave the shortest step
    sweeps(fusion, cycle)    both of the notebook's sweeps
    reruns(fusion, cycle, r) where a sweep ran the lab's setting again: that run against run `r`
    timeline(totals, wall)   where rank 0's timeline spent its time: wall-clock shares (`wall`), sums
                             over overlapping tensors named as such; a negotiation span is waiting
    findings(...)            all of them, for the summary cell before the key takeaways

A row's spread ("±") is the 95 % confidence interval of its mean total img/s over the timed
iterations (`runs.iteration_ci`, `core.spread.mean_ci`: not the benchmark's printed 1.96 sigma of
single iterations); a step time carries the same relative interval, an efficiency combines its two
rates' (`core.spread.combined`). A run without an interval (one iteration) decides nothing.
"""
from __future__ import annotations

import math

from dltutor.core import env
from dltutor.core.spread import combined
from dltutor.core.findings import INCONCLUSIVE, against, compare, differs, fmt, trend
from dltutor.ddp.scaling import weak_efficiency
from dltutor.horovod.runs import SEED_1GPU_TOTAL, SEED_2GPU_TOTAL

SEED_EFFICIENCY = weak_efficiency(SEED_2GPU_TOTAL, SEED_1GPU_TOTAL, 2)   # 0.968
SEED_SOURCE = "seed 001 (2 nodes x 1 V100, mpirun_rsh; a REFERENCE, not measured here)"


def total_spread(row: dict) -> float:
    """± of a row's total img/s: the 95 % CI of its mean over the timed iterations (nan: none)."""
    h = row.get("total_img_sec_ci")
    return math.nan if h is None else float(h)


def efficiency_spread(row: dict, base: dict) -> float:
    """± of efficiency = total / (base total x scale): the two relative CIs in quadrature."""
    eff = weak_efficiency(row["total_img_sec"], base["total_img_sec"], row["workers"] / base["workers"])
    return eff * combined(total_spread(row) / row["total_img_sec"],
                          total_spread(base) / base["total_img_sec"])


def scaling(rows: list[dict]) -> list[str]:
    """Sentences on one engine's scaling rows (fewest workers first is the base)."""
    rows = sorted(rows, key=lambda r: r["workers"])
    base, out = rows[0], []
    if env.fast_mode():
        out.append("FAST MODE: tiny images and a few timed steps, so compute is small and the "
                   "all-reduce weighs far more than at full size; read the method, not the digits.")
    for r in rows[1:]:
        n, n0 = r["workers"], base["workers"]
        out.append(compare(f"{n} workers", r["total_img_sec"], f"{n0} worker{'s' * (n0 > 1)}",
                           base["total_img_sec"], unit="img/s in total",
                           spread_a=total_spread(r), spread_b=total_spread(base)))
        eff = weak_efficiency(r["total_img_sec"], base["total_img_sec"], n / n0)
        tol = efficiency_spread(r, base)
        if math.isnan(tol):
            out.append(f"scaling efficiency on {n} workers: {eff:.2f} measured vs {SEED_EFFICIENCY:.2f} "
                       f"from {SEED_SOURCE}: {INCONCLUSIVE}, a run of one timed iteration gives no interval.")
            continue
        out.append(against(f"scaling efficiency on {n} workers (±{tol:.2f}, 95 % CI)",
                           eff, SEED_EFFICIENCY, tolerance=tol, source=SEED_SOURCE))
    return out


def engines(hvd_rows: list[dict], ddp_rows: list[dict]) -> list[str]:
    """Horovod vs DDP at each worker count both engines ran."""
    out = []
    for d in sorted(ddp_rows, key=lambda r: r["workers"]):
        h = next((r for r in hvd_rows if r["workers"] == d["workers"]), None)
        if h is not None:
            out.append(f"{d['workers']} workers: " + compare(
                "Horovod", h["total_img_sec"], "DDP", d["total_img_sec"], unit="img/s",
                spread_a=total_spread(h), spread_b=total_spread(d)))
    return out


def sweep(name: str, points, label=lambda v: f"{v:g}") -> list[str]:
    """Sentences on a `runs.sweep_setting` result [(value, s/step, spread, run)]: lower is better."""
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
        out.append(f"{head}, but {', '.join(ties)} {'is' if len(ties) == 1 else 'are'} inside the "
                   f"spreads: which setting is best is {INCONCLUSIVE}.")
    else:
        out.append(f"{head}, shorter than every other value beyond the spreads.")
    return out


NEGOTIATION_IS_WAITING = (
    "A negotiation span is rank 0 waiting until every worker has reported that tensor ready: it "
    "measures how far apart the workers are (skew, e.g. one still in its backward), not what the "
    "protocol's messages cost.")


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


def sweeps(fusion, cycle) -> list[str]:
    """Both sweeps of notebook 03: fusion threshold (labelled in MiB) and cycle time (ms)."""
    from dltutor.horovod.plots import fusion_label
    return (sweep("HOROVOD_FUSION_THRESHOLD", fusion, lambda v: fusion_label(int(v)))
            + sweep("HOROVOD_CYCLE_TIME", cycle, lambda v: f"{v:g} ms"))


def reruns(fusion, cycle, lab_row: dict) -> list[str]:
    """`rerun` for both sweeps: where a panel's dark bar is a new run, it against the run above."""
    from dltutor.horovod.plots import fusion_label
    return (rerun("HOROVOD_FUSION_THRESHOLD", fusion, lab_row, lambda v: fusion_label(int(v)))
            + rerun("HOROVOD_CYCLE_TIME", cycle, lab_row, lambda v: f"{v:g} ms"))


def rerun(name: str, points, lab_row: dict, label=lambda v: f"{v:g}") -> list[str]:
    """When a sweep ran the lab's own value again (`runs.sweep_setting` reuses the run above only
    when the value is not in its list), that new run against the run above: same settings, two runs."""
    from dltutor.horovod.runs import SETTING_KEYS
    value = float(lab_row[SETTING_KEYS[name]])
    new = next((p for p in points if p[0] == value and not p[3].endswith("(run above)")), None)
    if new is None:
        return []
    above, spread = 1000 * lab_row["step_time_s"], 1000 * lab_row["step_time_ci_s"]
    text = compare(f"{name}={label(value)} (the lab's setting) run again in this sweep", 1000 * new[1],
                   "the run above with the same settings", above, unit="ms", spread_a=1000 * new[2],
                   spread_b=spread)
    if differs(1000 * new[1], above, 1000 * new[2], spread):
        text += " Two runs of the same settings differ beyond their spreads: the spreads understate run-to-run noise."
    return [text]


def findings(scaling_rows, hvd_rows, ddp_rows, fusion, cycle, totals, wall=None) -> list[str]:
    """All of notebook 03's findings, in the order of its sections."""
    return (scaling(scaling_rows) + engines(hvd_rows, ddp_rows) + sweeps(fusion, cycle)
            + timeline(totals, wall))
