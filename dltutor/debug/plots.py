"""Notebook 08's two figures: the straggler's step anatomy, and how long each fault stayed hidden.

Every title carries the run's labels (SYNTHETIC data, CPU/gloo, fast mode) from core.plots.
"""
from __future__ import annotations

from dltutor.core.plots import finish, labels


def plot_straggler(slow_rows, fixed_rows, path=None):
    """Per rank: compute and backward (which holds the wait in the all-reduce), with a slow rank
    and without (rows of dltutor.debug.diagnose.straggler)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names, compute, backward = [], [], []
    for tag, rows in (("with straggler", slow_rows), ("without", fixed_rows)):
        for r in rows:
            names.append(f"rank {r['rank']}\n{tag}")
            compute.append(r["compute_ms"])
            backward.append(r["backward_ms"])
    ax.barh(names, compute, label="compute (forward + what slows it)")
    ax.barh(names, backward, left=compute, label="backward + waiting in the all-reduce")
    ax.set_xlabel("ms per step (mean)")
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"Where each rank's step goes {labels('SYNTHETIC')}", fontsize=9)
    return finish(fig, ax, path)


def plot_time_to_message(rows, path=None):
    """Seconds from each fault to the first message that names it (rows of
    dltutor.debug.findings.timing_row; faults never named are left out)."""
    import matplotlib.pyplot as plt
    shown = [r for r in rows if r["first_message_s"] is not None]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(shown) + 1.2))
    ax.barh([f"{r['section']}: {r['fault']}" for r in shown],
            [max(r["first_message_s"], 1e-3) for r in shown], label="first message or check")
    ax.set_xscale("log")
    ax.set_xlabel("seconds from the fault to the first message or check about it (log scale)")
    ax.invert_yaxis()
    ax.set_title(f"How long each fault stayed hidden {labels('SYNTHETIC')}", fontsize=9)
    return finish(fig, ax, path)
