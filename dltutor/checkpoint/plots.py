"""Notebook 10's figures: loss curves of uninterrupted and resumed runs, drawn on top of each other.

Every title carries the runs' labels (Fashion-MNIST, CPU/gloo or GPU/nccl from the runs' own
metrics, fast mode). Curves are (steps, losses) pairs of one rank (dltutor.checkpoint.lab_runs.curve).
"""
from __future__ import annotations

from dltutor.core import env
from dltutor.core.plots import finish

DATA = "Fashion-MNIST"


def labels(hardware: str) -> str:
    """'[Fashion-MNIST, CPU/gloo, fast mode]': the runs' own hardware (a run's metrics say it; the
    kernel's device may differ, e.g. ranks moved to the CPU on a node with one GPU)."""
    return "[" + ", ".join([DATA, hardware] + (["fast mode"] if env.fast_mode() else [])) + "]"


def plot_resume(curves: dict, stop_at: int, hardware: str, path=None):
    """One panel per wrap: the uninterrupted run's loss (a line) and the stopped-then-resumed run's
    (markers) on top of it, the stop marked. `curves`: {wrap: {"whole": (steps, losses),
    "resumed": (steps, losses)}}; `hardware`: the runs' label (CPU/gloo or GPU/nccl)."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.4), squeeze=False)
    for ax, (wrap, c) in zip(axes[0], curves.items()):
        ax.plot(*c["whole"], color="tab:blue", lw=2.5, alpha=0.6, label="uninterrupted")
        ms = 6 if len(c["resumed"][0]) <= 30 else 3
        ax.plot(*c["resumed"], ls="none", marker="x", ms=ms, color="black",
                label=f"stopped at {stop_at}, resumed")
        ax.axvline(stop_at, color="tab:red", ls=":", lw=1, label="stop / resume")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (rank 0)")
        ax.set_title(f"{wrap.upper()}, 2 ranks", fontsize=9)
        finish(fig, ax)
    fig.suptitle(f"Stopped and resumed vs uninterrupted {labels(hardware)}", fontsize=10)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def plot_parts(whole, resumed: dict, stop_at: int, hardware: str, path=None):
    """Each resume with one part left out, as its loss minus the uninterrupted run's at the same
    step (0 everywhere: the same run). `whole`: (steps, losses); `resumed`: {part: (steps, losses)}."""
    import matplotlib.pyplot as plt
    base = dict(zip(*whole))
    fig, ax = plt.subplots(figsize=(9, 3.4))
    ax.axhline(0.0, color="black", lw=1, alpha=0.6, label="uninterrupted (every part restored)")
    for (part, (steps, losses)), marker in zip(resumed.items(), "os^vD"):
        after = [(s, v - base[s]) for s, v in zip(steps, losses) if s > stop_at and s in base]
        ax.plot([s for s, _ in after], [d for _, d in after], marker=marker,
                ms=4 if len(after) <= 30 else 0, lw=1, label=f"resumed without {part}")
    ax.axvline(stop_at, color="tab:red", ls=":", lw=1, label="stop / resume")
    ax.set_xlabel("step")
    ax.set_ylabel("loss minus uninterrupted loss\n(rank 0)")
    ax.set_title(f"Resumed without one part of the checkpoint {labels(hardware)}", fontsize=9)
    finish(fig, ax)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the curves, not on them
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig
