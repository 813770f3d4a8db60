"""General plots for the course: training curves and side-by-side bars, with honest titles.

Every title made here ends with the labels that are true for the run: 'SYNTHETIC data',
'CPU/gloo' or 'GPU/nccl', and 'fast mode'. Topic-specific plots live in their own viz modules.
"""
from __future__ import annotations

from dltutor import env


def labels(data: str | None = None) -> str:
    """'[SYNTHETIC data, CPU/gloo, fast mode]'-style suffix for titles and printouts."""
    parts = []
    if data and data.upper().startswith("SYNTHETIC"):
        parts.append("SYNTHETIC data")
    elif data:
        parts.append(data)
    parts.append(env.hardware_label())
    if env.fast_mode():
        parts.append("fast mode")
    return "[" + ", ".join(parts) + "]"


def _data_of(history) -> str | None:
    meta = getattr(history, "meta", None) or (history.get("meta") if isinstance(history, dict) else None)
    return (meta or {}).get("data")


def plot_history(history, title: str = "Training", path=None):
    """Loss (per step and per epoch) and accuracy (train and test) curves; returns the figure."""
    import matplotlib.pyplot as plt
    h = history.to_dict() if hasattr(history, "to_dict") else dict(history)
    epochs = [e + 1 for e in h["epoch"]]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    steps = h.get("step_loss") or []
    if steps and epochs:
        per_epoch = len(steps) / len(epochs)
        ax_loss.plot([(i + 1) / per_epoch for i in range(len(steps))], steps, lw=0.8, alpha=0.5,
                     label="train loss, each step")
    ax_loss.plot(epochs, h["train_loss"], "o-", label="train loss, epoch mean")
    ax_loss.plot(epochs, h["test_loss"], "s-", label="test loss")
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy loss", title="Loss (lower is better)")
    ax_acc.plot(epochs, [100 * a for a in h["train_acc"]], "o-", label="train accuracy")
    ax_acc.plot(epochs, [100 * a for a in h["test_acc"]], "s-", label="test accuracy")
    ax_acc.axhline(10, color="grey", ls=":", label="chance (10 classes)")
    ax_acc.set(xlabel="epoch", ylabel="top-1 accuracy (%)", title="Accuracy (higher is better)", ylim=(0, 100))
    for ax in (ax_loss, ax_acc):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{title} {labels(_data_of(h))}")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def bar_compare(table, metric: str = "img_per_s", title: str = "", label_key: str = "variant",
                data: str | None = None, unit: str = "training images/s", path=None):
    """Horizontal bars of `metric` for each row of `table` (list of dicts). Rows without a value
    show their `status` text (e.g. 'needs a GPU') instead of a bar."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(table) + 1.5))
    names = [str(r[label_key]) for r in table][::-1]
    values = [r.get(metric) or 0 for r in table][::-1]
    bars = ax.barh(names, values, color=["tab:blue" if v else "lightgrey" for v in values])
    top = max(values) if any(values) else 1
    for bar, r in zip(bars, table[::-1]):
        v = r.get(metric)
        text = f"{v:,.0f}" if v else r.get("status", "n/a")
        if v and r.get("speedup"):
            text += f"  ({r['speedup']:.2f}x)"
        ax.text(bar.get_width() + 0.01 * top, bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=9)
    ax.set_xlim(0, top * 1.35)
    ax.set_xlabel(f"{unit} (higher is better)")
    ax.set_title(f"{title} {labels(data)}".strip())
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def show_images(ds, n: int = 16, title: str = "Training images", path=None):
    """A grid of the first `n` images of a (PIL image, label) dataset with their class names."""
    import matplotlib.pyplot as plt
    import numpy as np
    from dltutor.data import data_label
    base = getattr(ds, "dataset", ds)
    classes = getattr(base, "classes", None)
    cols = min(8, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(1.4 * cols, 1.6 * rows + 0.6))
    for i, ax in enumerate(np.ravel(axes)):
        ax.axis("off")
        if i < min(n, len(ds)):
            img, y = ds[i]
            ax.imshow(np.asarray(img))
            ax.set_title(classes[y] if classes else str(y), fontsize=8)
    fig.suptitle(f"{title} {labels(data_label(ds))}")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def history_table(history) -> str:
    """The per-epoch numbers of a History as a small text table."""
    h = history.to_dict() if hasattr(history, "to_dict") else dict(history)
    lines = [f"{'epoch':>5} {'train loss':>10} {'train acc':>9} {'test loss':>9} {'test acc':>8} {'img/s':>8}"]
    for i, e in enumerate(h["epoch"]):
        lines.append(f"{e + 1:>5} {h['train_loss'][i]:>10.4f} {h['train_acc'][i]:>9.3f} "
                     f"{h['test_loss'][i]:>9.4f} {h['test_acc'][i]:>8.3f} {h['img_per_s'][i]:>8.0f}")
    lines.append(labels(_data_of(h)))
    return "\n".join(lines)
