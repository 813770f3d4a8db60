"""Section 4's timeline in sentences: the iteration-time model's terms per bucket variant.

    overlap_table(rows)   # per variant: mean of each term over ranks x profiled steps
    overlap(table, rounds_profiled=1)   # sentences: exposed communication, overlap fraction
    contention(scaling_row, table)      # the all-reduce's share of a step against the efficiency lost

The overlap fraction T_overlap / T_comm is wall-clock concurrency: the time a gloo all-reduce span
runs while backward runs, waiting for the peer rank included, so many small buckets raise it
without hiding any more work. What a step pays for communication is the exposed part,
T_comm - T_overlap. Every term comes from the profiled steps of ONE launch per variant (its first
round), with the profiler on; their ± over ranks x steps is of that one launch only.
"""
from __future__ import annotations

from dltutor.core import spread as ci
from dltutor.core.findings import INCONCLUSIVE, differs, fmt

TERMS = ("t_iter_ms", "t_forward_ms", "t_backward_ms", "t_comm_ms", "t_overlap_ms", "t_other_ms")


def _pm(h: float) -> str:
    return f"± {h:.3f}" if ci.decided(h) else "± n/a"


def overlap_table(rows: list[dict]) -> list[dict]:
    """Per variant (`label`): the mean of each term over ranks x profiled steps, the exposed
    communication T_comm - T_overlap, and the overlap fraction with its 95 % CI over ranks x
    profiled steps (`core.spread.mean_ci`)."""
    out = []
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        row = {"label": label, **{k: sum(r[k] for r in mine) / len(mine) for k in TERMS}}
        fr = [r["overlap_fraction"] for r in mine]
        exposed = [r["t_comm_ms"] - r["t_overlap_ms"] for r in mine]
        row.update(overlap_fraction=sum(fr) / len(fr), fraction_spread=ci.mean_ci(fr),
                   t_exposed_ms=sum(exposed) / len(exposed), exposed_spread=ci.mean_ci(exposed),
                   buckets=max(r["buckets"] for r in mine), samples=len(mine))
        out.append(row)
    return out


def overlap(table: list[dict], no_overlap: str = "no overlap") -> list[str]:
    """Sentences on `overlap_table`: what the timeline is (one launch), each variant's exposed
    communication against the lowest, the overlap fraction (concurrency, not saving), the control."""
    n = max(r.get("samples", 0) for r in table)
    lines = [f"These terms come from one launch per variant (the first round's), {n} samples (ranks x "
             "profiled steps) each, with the profiler on (its steps run slower than the timed ones); the ± "
             "is over those samples of one launch, not over launches."]
    lines.append("exposed communication T_comm - T_overlap (what the step waits for the all-reduce): " + ", ".join(
        f"{r['label']} {r['t_exposed_ms']:.0f} ± {fmt(r.get('exposed_spread', float('nan')))} ms of "
        f"{r['t_comm_ms']:.0f} ms all-reduce"
        for r in table) + ".")
    low = min(table, key=lambda r: r["t_exposed_ms"])
    fwd = [r["t_forward_ms"] for r in table]
    for r in table:
        if r is low:
            continue
        a, b = low["t_exposed_ms"], r["t_exposed_ms"]
        if differs(a, b, low.get("exposed_spread", float("nan")), r.get("exposed_spread", float("nan"))):
            lines.append(f"{low['label']} exposed less communication than {r['label']} ({a:.0f} vs {b:.0f} ms), "
                         f"in this one launch; T_forward alone moved from {min(fwd):.0f} to {max(fwd):.0f} ms "
                         "across variants, so whether that shortens the step is the step-time verdict's question.")
        else:
            lines.append(f"exposed communication, {low['label']} {a:.0f} ms vs {r['label']} {b:.0f} ms: "
                         f"{INCONCLUSIVE}, the spreads cover the gap.")
    lines.append("overlap fraction (T_overlap / T_comm: the share of the all-reduce spans that ran while "
                 "backward ran, waiting for the other rank included, so it is concurrency, not time saved): "
                 + ", ".join(f"{r['label']} {r['overlap_fraction']:.2f} {_pm(r['fraction_spread'])} "
                             f"({r['buckets']} all-reduce{'s' if r['buckets'] != 1 else ''} per step)"
                             for r in table) + ".")
    ctrl = next((r for r in table if r["label"].startswith(no_overlap)), None)
    if ctrl:
        hidden = ctrl["overlap_fraction"] > 0.05
        lines.append(f"control, {ctrl['label']}: overlap fraction {ctrl['overlap_fraction']:.2f}, "
                     + ("above 0: some all-reduce ran during backward, which --no-overlap should prevent."
                        if hidden else "0 as it must be: its one all-reduce starts after backward."))
    cover = ", ".join(f"{r['label']} {(r['t_iter_ms'] - r['t_other_ms']) / r['t_iter_ms']:.0%} of "
                      f"{r['t_iter_ms']:.0f} ms" for r in table if r["t_iter_ms"] > 0)
    lines.append(f"T_forward + T_backward + T_comm - T_overlap accounts for {cover}; the rest "
                 "(T_other) is the optimizer step, waiting for the other rank and gaps between ops.")
    return lines


def contention(scaling_row: dict, table: list[dict], no_overlap: str = "no overlap") -> str | None:
    """The efficiency lost in section 2 against the all-reduce's share of a step in the profile
    (the no-overlap control: its whole all-reduce is exposed). Where the loss is far larger, the
    rest is the ranks competing for the machine's cores and memory, not communication."""
    ctrl = next((r for r in table if r["label"].startswith(no_overlap)), None)
    if not ctrl or not ctrl["t_iter_ms"]:
        return None
    share = ctrl["t_exposed_ms"] / ctrl["t_iter_ms"]
    lost = 1 - scaling_row["efficiency"]
    return (f"Weak-scaling efficiency {scaling_row['efficiency']:.2f} loses {lost:.0%} of the ideal; in the "
            f"profile the all-reduce is {ctrl['t_exposed_ms']:.0f} ms of a {ctrl['t_iter_ms']:.0f} ms step "
            f"({share:.0%}, {ctrl['label']}, section 4's wider model, so an upper bound for section 2's)"
            + (": communication explains a small part of the loss; the rest is the ranks competing for "
               "the cores (and memory bandwidth) of this machine, contention." if share < lost / 2 else
               ": communication accounts for a large part of the loss."))
