"""Notebook 09's long-sequence plots: blocks of work per rank, bytes per rank, memory per rank."""
from __future__ import annotations

import numpy as np

from dltutor.core.plots import labels


def _save(fig, path):
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_blocks(rows: list, path=None):
    """Causal blocks of work per rank (bars, counted), the formula as black ticks; one panel per
    layout, the rank counts side by side."""
    import matplotlib.pyplot as plt
    layouts = [l for l in ("contiguous", "zigzag") if any(r["layout"] == l for r in rows)]
    fig, axes = plt.subplots(1, len(layouts), figsize=(5.5 * len(layouts), 3.6), sharey=True)
    for ax, layout in zip(np.atleast_1d(axes), layouts):
        placed = _placed(rows, layout)
        for n in sorted({r["ranks"] for _, r in placed}):
            pts = [(x, r) for x, r in placed if r["ranks"] == n]
            ax.bar([x for x, _ in pts], [r["blocks"] for _, r in pts], label=f"{n} ranks (counted)")
        ax.scatter([x for x, _ in placed], [r["formula"] for _, r in placed], marker="_", s=300,
                   color="black", zorder=3, label="ring.blocks_formula")
        ax.set_xticks([x for x, _ in placed], [f"r{r['rank']}" for _, r in placed])
        ax.set_title(f"causal, {layout} {labels()}", fontsize=9)
        ax.set_xlabel("rank (grouped by rank count)")
        ax.legend(fontsize=7)
    np.atleast_1d(axes)[0].set_ylabel("blocks of (S/P)x(S/P) work")
    return _save(fig, path)


def _placed(rows, layout):
    """(x, row) for each rank's bar: ranks in order, one gap between rank counts."""
    out, x, last = [], 0, None
    for r in sorted((r for r in rows if r["layout"] == layout), key=lambda r: (r["ranks"], r["rank"])):
        if last is not None and r["ranks"] != last:
            x += 1
        out.append((x, r))
        x, last = x + 1, r["ranks"]
    return out


def plot_bytes(rows: list, path=None):
    """Bytes one rank sends per layer (forward + backward), ring vs Ulysses by rank count: bars
    counted, black ticks the formulas."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ranks = sorted({r["ranks"] for r in rows})
    for i, impl in enumerate(("ring", "ulysses")):
        pts = {r["ranks"]: r for r in rows if r["impl"] == impl}
        xs = [j + 0.4 * i for j, n in enumerate(ranks) if n in pts]
        got = [pts[n]["forward"] + pts[n]["backward"] for n in ranks if n in pts]
        want = [pts[n]["formula forward"] + pts[n]["formula backward"] for n in ranks if n in pts]
        ax.bar(xs, got, 0.4, label=f"{impl} (counted)")
        ax.scatter(xs, want, marker="_", s=300, color="black", zorder=3,
                   label="formula" if i == 0 else None)
    ax.set_xticks([j + 0.2 for j in range(len(ranks))], [f"{n} ranks" for n in ranks])
    ax.set_ylabel("bytes sent per rank per layer (fwd + bwd)")
    ax.set_title(f"What each rank sends: ring vs Ulysses {labels()}", fontsize=9)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_memory(rows: list, path=None):
    """Peak bytes per rank vs sequence length (log-log): measured points, formula lines, one
    colour per rank count (1 = the whole sequence on one process)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, n in enumerate(sorted({r["ranks"] for r in rows})):
        pts = sorted((r for r in rows if r["ranks"] == n), key=lambda r: r["seq"])
        color = f"C{i}"
        name = "one process" if n == 1 else f"ring, {n} ranks (per rank)"
        ax.plot([r["seq"] for r in pts], [r["peak_bytes"] for r in pts], "o", color=color,
                label=f"{name}: measured")
        ax.plot([r["seq"] for r in pts], [r["formula_bytes"] for r in pts], "-", color=color,
                alpha=0.6, label=f"{name}: formula")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length S")
    ax.set_ylabel("peak bytes per rank (forward + backward)")
    ax.set_title(f"Attention's activation memory per rank {labels()}", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, path)
