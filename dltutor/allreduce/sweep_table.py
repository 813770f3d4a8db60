"""Notebook 05's tables of timed sweeps, each statistic named: the fastest pass (what the α-β
fits use), the median and the slowest of the passes, and how disturbed each pass was.

- `sweep_lines(runs)`: runs[N] = `collectives.measure_allreduce` summary -> the printed table rows,
  then one line per N on the passes' disturbance (`paired.disturbance_line`).
- `hier_lines(summary)`: the same for `hierarchical.measure_hierarchical`'s summary.
"""
from __future__ import annotations

from dltutor.allreduce import paired
from dltutor.core.units import fmt_bytes


def _median(xs) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def _passes(rows: list[dict]) -> int:
    return min((len(r.get("times_s") or [r["time_s"]]) for r in rows), default=0)


def _stats(r: dict) -> str:
    ts = r.get("times_s") or [r["time_s"]]
    return f"{r['time_s'] * 1e6:12.1f} {_median(ts) * 1e6:11.1f} {max(ts) * 1e6:12.1f}"


def sweep_lines(runs: dict) -> list[str]:
    """Rows N, size, algorithm, fastest / median / slowest pass (µs), algbw and busbw of the
    fastest pass; then, per N, the disturbance of each pass."""
    first = next(iter(runs.values()))
    p = _passes(first["results"])
    out = [f"times: fastest, median and slowest of {p} passes (the α-β fits use the fastest); "
           f"algbw and busbw from the fastest pass",
           f"{'N':>2} {'size':>8} {'algorithm':<19} {'fastest (us)':>12} {'median (us)':>11} "
           f"{'slowest (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11}"]
    for n, s in runs.items():
        for r in sorted(s["results"], key=lambda r: (r["bytes"], r["algorithm"])):
            out.append(f"{n:>2} {fmt_bytes(r['bytes']):>8} {r['algorithm']:<19} {_stats(r)} "
                       f"{r['algbw_GBps']:11.3f} {r['busbw_GBps']:11.3f}")
    out.append("")
    out += [paired.disturbance_line(s["results"], f"N = {n}", s.get("load")) for n, s in runs.items()]
    return out


def hier_lines(summary: dict) -> list[str]:
    """Rows size, algorithm, fastest / median / slowest pass (µs); then the passes' disturbance."""
    p = _passes(summary["results"])
    out = [f"times: fastest, median and slowest of {p} passes",
           f"{'size':>8} {'algorithm':<13} {'fastest (us)':>12} {'median (us)':>11} {'slowest (us)':>12}"]
    for r in sorted(summary["results"], key=lambda r: (r["bytes"], r["algorithm"])):
        out.append(f"{fmt_bytes(r['bytes']):>8} {r['algorithm']:<13} {_stats(r)}")
    return out + ["", paired.disturbance_line(summary["results"], f"{summary['world_size']} ranks",
                                              summary.get("load"))]
