"""Lab 09's MoE study drawn: load over steps, drops against capacity, the straggler, all-to-all time.

Every title ends with dltutor.core.plots.labels (the data set, CPU/gloo or GPU/nccl, fast mode).
Each function takes the rows of dltutor.experts.runs and returns the figure.
"""
from __future__ import annotations

from collections import defaultdict

from dltutor.core.plots import labels
from dltutor.experts import runs

DATA = "Fashion-MNIST"


def plot_load(study: dict, path=None):
    """Each expert's share of the routed slots per step, with and without the auxiliary loss."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, key, name in zip(axes, ("aux", "no_aux"), ("with aux loss", "without aux loss")):
        reps = study[key]
        steps, shares = runs.share_over_steps(reps)
        for e, share in enumerate(shares):
            ax.plot(steps, share, label=f"expert {e}" + (" (skewed)" if e == 0 and reps[0]["skew"] else ""))
        ax.axhline(1 / len(shares), color="grey", ls="--", lw=1, label="even share")
        ax.set_title(f"{name} (weight {reps[0]['aux_weight']:g}), skew {reps[0]['skew']:g}", fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of routed slots (all ranks)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Expert load over training {labels(DATA)}")
    return _done(fig, path)


def plot_drops(rows: list[dict], path=None):
    """Dropped fraction against capacity factor, one line per skew."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4))
    by_skew = defaultdict(list)
    for r in rows:
        if r["capacity factor"] != "none":
            by_skew[r["skew"]].append((r["capacity factor"], r["dropped fraction"]))
    for skew, pts in sorted(by_skew.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], "o-", label=f"skew {skew:g}")
    ax.set_xlabel("capacity factor")
    ax.set_ylabel("slots dropped (%)")
    ax.set_title(f"Dropped slots vs capacity {labels(DATA)}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _done(fig, path)


def plot_straggler(rows: list[dict], path=None):
    """Rows each rank's experts processed per skew (left), and each rank's expert time (right)."""
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    ranks = len(rows[0]["rows per rank"])
    width = 0.8 / ranks
    xs = range(len(rows))
    for k in range(ranks):
        left.bar([x + k * width for x in xs], [r["rows per rank"][k] for r in rows], width, label=f"rank {k}")
        right.bar([x + k * width for x in xs], [r["expert ms per rank"][k] for r in rows], width,
                  yerr=[r.get("± expert ms per rank", [0] * ranks)[k] for r in rows], capsize=3,
                  label=f"rank {k}")
    for ax, what in ((left, "rows processed by the rank's experts"),
                     (right, "expert time (ms, mean of repeats, 95 % CI)")):
        ax.set_xticks([x + 0.4 - width / 2 for x in xs])
        ax.set_xticklabels([f"skew {r['skew']:g}" for r in rows])
        ax.set_ylabel(what)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Imbalance per rank, no capacity limit {labels(DATA)}")
    return _done(fig, path)


def plot_alltoall(fit: dict, path=None):
    """Each all-to-all's time against the bytes this rank sent, and the fitted alpha + bytes*beta."""
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(6.5, 4))
    xs = [p["bytes"] for p in fit["points"]]
    ax.plot(xs, [p["seconds"] * 1e6 for p in fit["points"]], "o", alpha=0.6, label="measured (each repeat)")
    grid = np.geomspace(min(xs), max(xs), 50)
    ax.plot(grid, (fit["alpha"] + grid * fit["beta"]) * 1e6, "-",
            label=f"alpha-beta fit: {fit['alpha'] * 1e6:.0f} us + bytes x {fit['beta'] * 1e9:.2g} ns")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes this rank sent in one all-to-all")
    ax.set_ylabel("time (us)")
    ax.set_title(f"MoE all-to-all vs the alpha-beta model {labels(DATA)}", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _done(fig, path)


def _done(fig, path):
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig
