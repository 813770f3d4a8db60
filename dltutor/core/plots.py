"""Honest labels for every title and printout, and side-by-side bars.

Every title made by the course ends with the labels that are true for the run: the data
('SYNTHETIC data', or the data set's name), 'CPU/gloo' or 'GPU/nccl', and 'fast mode'.
Topic plots live in each topic's plots.py.
"""
from __future__ import annotations

from dltutor.core import env
from dltutor.core.device import hardware_label


def labels(data: str | None = None) -> str:
    """'[SYNTHETIC data, CPU/gloo, fast mode]'-style suffix for titles and printouts."""
    parts = []
    if data and data.upper().startswith("SYNTHETIC"):
        parts.append("SYNTHETIC data")
    elif data:
        parts.append(data)
    parts.append(hardware_label())
    if env.fast_mode():
        parts.append("fast mode")
    return "[" + ", ".join(parts) + "]"


def bar_compare(table, metric: str = "img_per_s", title: str = "", label_key: str = "variant",
                data: str | None = None, unit: str = "training images/s", path=None):
    """Horizontal bars of `metric` for each row of `table` (list of dicts), with error bars of a
    row's `spread` (its 95 % CI) where it has one. Rows without a value show their `status` text
    (e.g. 'not timed on a CPU') instead of a bar."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(table) + 1.5))
    names = [str(r[label_key]) for r in table][::-1]
    values = [r.get(metric) or 0 for r in table][::-1]
    errs = [r.get("spread") if r.get(metric) and r.get("spread") == r.get("spread") else 0
            for r in table][::-1]          # the rows' 95 % CI where they have one (nan: none)
    bars = ax.barh(names, values, color=["tab:blue" if v else "lightgrey" for v in values],
                   xerr=errs if any(errs) else None, capsize=3)
    top = max(values) if any(values) else 1
    for bar, r in zip(bars, table[::-1]):
        v = r.get(metric)
        text = f"{v:,.0f}" if v else r.get("status", "n/a")
        if v and r.get("speedup"):
            text += f"  ({r['speedup']:.2f}x)"
        ax.text(bar.get_width() + 0.01 * top, bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=9)
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel(f"{unit} (higher is better)" + (", mean ± 95 % CI" if any(errs) else ""))
    ax.set_title(f"{title} {labels(data)}".strip())
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def finish(fig, ax, path=None):
    """The common end of a line plot: a light grid, a small legend, a tight layout, saved to `path`."""
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig
