"""Notebook 01's pictures: training curves, a grid of images, the per-epoch table."""
from __future__ import annotations

from dltutor.core.plots import labels
from dltutor.core.tables import Table


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


def show_images(ds, n: int = 16, title: str = "Training images", path=None):
    """A grid of the first `n` images of a (PIL image, label) dataset with their class names."""
    import matplotlib.pyplot as plt
    import numpy as np
    from dltutor.data.cifar10 import data_label
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


def history_table(history) -> Table:
    """The per-epoch numbers of a History as a small table (HTML in Jupyter, text under print)."""
    h = history.to_dict() if hasattr(history, "to_dict") else dict(history)
    rows = [{"epoch": e + 1, "train loss": h["train_loss"][i], "train acc": h["train_acc"][i],
             "test loss": h["test_loss"][i], "test acc": h["test_acc"][i],
             "img/s": h["img_per_s"][i]} for i, e in enumerate(h["epoch"])]
    return Table(rows, ["epoch", "train loss", "train acc", "test loss", "test acc", "img/s"],
                 digits={"train loss": 4, "test loss": 4, "train acc": 3, "test acc": 3,
                         "img/s": 0}, note=labels(_data_of(h)))
