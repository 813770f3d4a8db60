"""Notebook 07's plots: formats, workers and prefetch, sharding, staging, and the step timeline.

Every title carries the run's labels (the data set, CPU/gloo or GPU, fast mode) from core.plots.
"""
from __future__ import annotations

from dltutor.core.plots import labels

NAN = float("nan")   # no interval: no error bar

DATA = "Fashion-MNIST"


def _save(fig, path):
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def _grouped_bars(ax, groups, series, values, unit, log=False, errors=None):
    """Bars of values[(group, series)] side by side per group, each labelled with its value;
    `errors[(group, series)]`: error bars (a rate's ± 95 % CI; nan: none drawn)."""
    import numpy as np
    width = 0.8 / len(series)
    for k, s in enumerate(series):
        xs = np.arange(len(groups)) + (k - (len(series) - 1) / 2) * width
        vals = [values.get((g, s)) or 0 for g in groups]
        err = [(errors or {}).get((g, s), float("nan")) for g in groups] if errors else None
        bars = ax.bar(xs, vals, width, label=str(s), yerr=err, capsize=3 if errors else 0)
        for b, v in zip(bars, vals):
            if v:
                ax.text(b.get_x() + b.get_width() / 2, v, f"{v:,.0f}" if v >= 10 else f"{v:.2g}",
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(unit)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def plot_formats(rows, path=None):
    """Read throughput (samples/s) and time-to-first-batch (ms) per format, cold vs warm."""
    import matplotlib.pyplot as plt
    fmts = list(dict.fromkeys(r["format"] for r in rows))
    caches = list(dict.fromkeys(r["cache"] for r in rows))
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    _grouped_bars(a, fmts, caches, {(r["format"], r["cache"]): r["samples_per_s"] for r in rows},
                  "samples/s (higher is better)",
                  errors={(r["format"], r["cache"]): r.get("spread_per_s", NAN) for r in rows})
    a.set_title("read throughput, mean over passes (bars: ± 95 % CI over passes)")
    _grouped_bars(b, fmts, caches, {(r["format"], r["cache"]): 1e3 * r["ttfb_s"] for r in rows},
                  "ms (lower is better)")
    b.set_title("time to first batch, mean over passes")
    fig.suptitle(f"{rows[0].get('passes', 1)} interleaved passes per set-up, num_workers={rows[0]['workers']} "
                 f"{labels(DATA)}")
    return _save(fig, path)


def plot_workers(rows, path=None):
    """samples/s (left) and time-to-first-batch (right) against num_workers, one line per prefetch."""
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    base = [r for r in rows if not r["workers"]]   # prefetch_factor means nothing without workers
    for pf in sorted({r["prefetch"] for r in rows if r["workers"]}):
        sel = base + sorted((r for r in rows if r["workers"] and r["prefetch"] == pf), key=lambda r: r["workers"])
        ws = [r["workers"] for r in sel]
        a.errorbar(ws, [r["samples_per_s"] for r in sel], yerr=[r.get("spread_per_s", NAN) for r in sel],
                   fmt="o-", capsize=3, label=f"prefetch_factor={pf} (mean ± 95 % CI over passes)")
        b.plot(ws, [1e3 * r["ttfb_s"] for r in sel], "o-", label=f"prefetch_factor={pf}")
    for ax, unit in ((a, "samples/s (higher is better)"), (b, "time to first batch, ms")):
        ax.set_xlabel("DataLoader num_workers")
        ax.set_ylabel(unit)
        ax.set_xticks(sorted({r["workers"] for r in rows}))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Workers and prefetch, format '{rows[0]['format']}', {rows[0]['cache']} "
                 f"{labels(DATA)}")
    return _save(fig, path)


def plot_sharding(rows, path=None):
    """Per rank: samples read and samples/s, file-level shards vs DistributedSampler."""
    import matplotlib.pyplot as plt
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    ranks = sorted({r["rank"] for r in rows})
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
    groups = [f"rank {k}" for k in ranks]
    _grouped_bars(a, groups, modes, {(f"rank {r['rank']}", r["mode"]): r["samples"] for r in rows},
                  "samples read by the rank")
    a.set_title("who reads how much")
    _grouped_bars(b, groups, modes,
                  {(f"rank {r['rank']}", r["mode"]): r["samples_per_s"] for r in rows},
                  "samples/s per rank (higher is better)",
                  errors={(f"rank {r['rank']}", r["mode"]): r.get("spread_per_s", NAN) for r in rows})
    b.set_title("read throughput per rank (bars: ± 95 % CI)")
    fig.suptitle(f"{len(ranks)} ranks reading one data set {labels(DATA)}")
    return _save(fig, path)


def plot_staging(stage, path=None):
    """The copy to 'node-local' disk beside a whole-data-set cold pass from each place (seconds:
    samples / mean samples/s over the interleaved passes)."""
    import matplotlib.pyplot as plt
    names = ["copy to local", "read from shared (cold)", "read from local (cold)"]
    n = stage["n"]
    secs = [stage["copy"]["seconds"]] + [n / stage[k]["samples_per_s"] for k in ("shared", "local")]
    fig, ax = plt.subplots(figsize=(9, 3))
    bars = ax.barh(names[::-1], secs[::-1], color=["tab:green", "tab:blue", "tab:orange"])
    for bar, s in zip(bars, secs[::-1]):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {s:.2f} s", va="center")
    ax.set_xlabel("seconds (lower is better)")
    same = "SAME device: staging cannot speed up reads here" if stage["copy"]["same_device"] \
        else "different devices"
    ax.set_title(f"Staging '{stage['format']}' to node-local disk {labels(DATA)}\n{same}",
                 fontsize=10)
    ax.set_xlim(0, max(secs) * 1.3)
    return _save(fig, path)


def plot_timeline(timelines, path=None):
    """Per model, one row per run: when the step waited for data (red) and computed (blue), each
    model on its own time axis (a light model's 2 ms steps vanish on a heavy model's axis); no
    edge lines, so a short segment keeps its colour. Right: the compute share after step 0."""
    import matplotlib.pyplot as plt
    from dltutor.io.starve import wait_share
    models = list(dict.fromkeys(n.split(" + ")[0] for n in timelines))
    per = {m: [n for n in timelines if n.split(" + ")[0] == m] for m in models}
    fig, axes = plt.subplots(len(models), 2, figsize=(13, 0.6 * len(timelines) + 1.2 * len(models) + 1),
                             gridspec_kw=dict(width_ratios=[3, 1], height_ratios=[len(per[m]) for m in models]),
                             squeeze=False)
    for (a, b), m in zip(axes, models):
        names = per[m]
        for k, name in enumerate(names):
            rows, y = timelines[name], len(names) - 1 - k
            a.broken_barh([(r["start"], r["wait_s"]) for r in rows], (y - 0.35, 0.7), color="tab:red",
                          linewidth=0)
            a.broken_barh([(r["start"] + r["wait_s"], r["compute_s"]) for r in rows], (y - 0.35, 0.7),
                          color="tab:blue", linewidth=0)
        a.set_yticks(range(len(names)), names[::-1])
        a.set_xlim(left=0)
        a.set_xlabel(f"seconds of the {m} runs' steps (own axis per model)")
        util = [1 - wait_share(timelines[n]) for n in names]
        bars = b.barh(names[::-1], util[::-1], color="tab:blue")
        for bar, u in zip(bars, util[::-1]):
            b.text(min(u, 0.75), bar.get_y() + bar.get_height() / 2, f" {u:.0%}", va="center")
        b.axvline(0.5, color="grey", ls="--")
        b.set_xlim(0, 1)
        b.set_yticks([])
    axes[0][0].set_title("red: waiting for data, blue: training step")
    axes[-1][1].set_xlabel("compute share after step 0 (utilisation)")
    fig.suptitle(f"Data wait vs compute per step {labels(DATA)}")
    return _save(fig, path)
