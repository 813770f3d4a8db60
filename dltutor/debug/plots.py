"""Notebook 08's two figures: the straggler's step anatomy, and how long each fault stayed hidden.

Every title carries the run's labels (SYNTHETIC data, CPU/gloo, fast mode) from core.plots.
"""
from __future__ import annotations

from dltutor.core.plots import finish, labels


def _save(fig, ax, path):
    """finish(), then save again with the whole title and labels (bbox_inches="tight")."""
    fig = finish(fig, ax, None)
    if path:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    return fig


def plot_straggler(slow_rows, fixed_rows, path=None):
    """Per rank: compute, backward (which holds the wait in the all-reduce) and the rest of the
    step, means over the steps after the first, with a slow rank and without (rows of
    dltutor.debug.diagnose.straggler); the error bar is the range of the steps (lowest to
    highest step time), one run each: no confidence interval."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names, parts, lo, hi = [], {"compute_ms": [], "backward_ms": [], "rest_ms": []}, [], []
    for tag, rows in (("with straggler", slow_rows), ("without", fixed_rows)):
        for r in rows:
            names.append(f"rank {r['rank']}\n{tag}")
            for k in parts:
                parts[k].append(max(r[k], 0.0))
            total = sum(max(r[k], 0.0) for k in parts)
            lo.append(max(total - r.get("step_lo", total), 0.0))
            hi.append(max(r.get("step_hi", total) - total, 0.0))
    left = [0.0] * len(names)
    for k, label in (("compute_ms", "compute (forward incl. DDP's buffer broadcast, a "
                                    "collective; + the stand-in's sleep)"),
                     ("backward_ms", "backward + waiting in the all-reduce"),
                     ("rest_ms", "rest of the step (checks, optimizer, logging)")):
        ax.barh(names, parts[k], left=left, label=label)
        left = [a + b for a, b in zip(left, parts[k])]
    ax.errorbar(left, range(len(names)), xerr=[lo, hi], fmt="none", ecolor="black", capsize=3,
                label="range of the step times (lowest-highest step)")
    n = sorted({r["steps"] for r in [*slow_rows, *fixed_rows]})
    ax.set_xlabel(f"ms per step (mean of {'/'.join(map(str, n))} steps after step 0, one run each)")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(f"Where each rank's step goes {labels('SYNTHETIC')}", fontsize=9)
    return _save(fig, ax, path)


def plot_time_to_message(rows, path=None):
    """Seconds from each fault to the first message that names it, one dot per fault (rows of
    dltutor.debug.hidden.time_to_message; faults never named are left out)."""
    import textwrap

    import matplotlib.pyplot as plt
    shown = [r for r in rows if r["first_message_s"] is not None]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(shown) + 1.5))
    names = [f"{r['section']}: {r['fault']}\n" + textwrap.fill(r.get("found_by", ""), 44)
             for r in shown]
    ax.plot([max(r["first_message_s"], 1e-3) for r in shown], range(len(shown)), "o",
            label="first message or check (one run each)")
    ax.set_yticks(range(len(shown)), names, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("seconds from the fault to the first message or check about it\n"
                  "(log scale; one run each, no repeats; under 1 ms drawn at 1 ms)")
    ax.invert_yaxis()
    ax.set_title(f"How long each fault stayed hidden {labels('SYNTHETIC')}", fontsize=9)
    return _save(fig, ax, path)
