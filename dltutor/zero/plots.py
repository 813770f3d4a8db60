"""Plots of the ZeRO memory anatomy: the formula per stage, predicted vs measured, samples/s.

    plot_memory_stack(memory.estimate_all_stages(p, d=2, ...), device_bytes=16 * GiB)
    plot_predicted_vs_measured(rows)      # rows from dltutor.zero.runs (MiB per rank)
    plot_samples_per_s(rows)
    plot_loss_trajectories([stage0_row, fsdp_row])   # FSDP2 on top of stage 0

Plots of a run carry the run's labels ('CPU/gloo', 'fast mode'); a plot of the formula alone says
'on paper' instead, because nothing ran.
"""
from __future__ import annotations

from dltutor.core.plots import labels
from dltutor.core.units import GiB

TERMS = (("M_m", "M_m parameters", "tab:blue"), ("M_g", "M_g gradients", "tab:orange"),
         ("M_o", "M_o optimizer (Adam + fp32 master)", "tab:green"),
         ("M_a", "M_a activations", "tab:grey"))


def _finish(fig, path):
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def plot_memory_stack(estimates, device_bytes=None, title: str = "Memory per device",
                      unit: float = GiB, unit_name: str = "GB (2^30 bytes)",
                      device_label: str = "device capacity", on_paper: bool = True, path=None):
    """Stacked bars of M_m / M_g / M_o / M_a per ZeRO stage, a line at `device_bytes`.

    `estimates` are `dltutor.zero.memory.MemoryEstimate`s (e.g. `estimate_all_stages`). A bar's total
    is written above it, green when it fits under the line and red when it does not.
    """
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    names = [f"stage {e.stage}\n(d={e.d})" for e in estimates]
    bottom = [0.0] * len(estimates)
    for key, text, color in TERMS:
        vals = [getattr(e, key) / unit for e in estimates]
        if not any(vals):
            continue
        ax.bar(names, vals, bottom=bottom, color=color, label=text, edgecolor="white")
        bottom = [b + v for b, v in zip(bottom, vals)]
    top = max(bottom + [device_bytes / unit if device_bytes else 0])
    for i, total in enumerate(bottom):
        fits = device_bytes is None or total * unit <= device_bytes
        ax.text(i, total + 0.01 * top, f"{total:,.1f}", ha="center", va="bottom", fontsize=10,
                fontweight="bold", color="darkgreen" if fits else "darkred")
    if device_bytes:
        ax.axhline(device_bytes / unit, color="red", ls="--", lw=1.5,
                   label=f"{device_label}: {device_bytes / unit:,.0f} (totals: red = too big)")
    ax.set_ylim(0, top * 1.15)
    ax.set_ylabel(f"bytes per device, {unit_name}")
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(axis="y", alpha=0.3)
    suffix = "[on paper: the formula, nothing ran]" if on_paper else labels()
    ax.set_title(f"{title} {suffix}", fontsize=10)
    return _finish(fig, path)


def plot_predicted_vs_measured(rows, title: str = "Model-state memory per rank", budget_mib=None,
                               path=None):
    """Grouped bars per config: the formula's M_m+M_o+M_g vs the bytes the rank really held.

    The measured bar is split into parameters / gradients / optimizer tensors; the ratio
    measured/predicted is written above each pair; `budget_mib` draws the budget as a line.
    """
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(rows) + 2), 4.8))
    x = list(range(len(rows)))
    w = 0.38
    ax.bar([i - w / 2 for i in x], [r["predicted"] for r in rows], w, color="lightgrey",
           edgecolor="black", hatch="//", label="predicted (formula)")
    bottom = [0.0] * len(rows)
    for key, text, color in (("params_MiB", "measured: parameters", "tab:blue"),
                             ("grads_MiB", "measured: gradients", "tab:orange"),
                             ("optimizer_MiB", "measured: optimizer", "tab:green")):
        vals = [r.get(key) or 0 for r in rows]
        ax.bar([i + w / 2 for i in x], vals, w, bottom=bottom, color=color, label=text)
        bottom = [b + v for b, v in zip(bottom, vals)]
    top = max([r["predicted"] for r in rows] + bottom + [budget_mib or 1])
    if budget_mib:
        ax.axhline(budget_mib, color="red", ls="--", lw=1.5,
                   label=f"budget: {budget_mib:g} MiB per process (all it allocates)")
    for i, r in enumerate(rows):
        if r.get("ratio"):
            ax.text(i, max(r["predicted"], bottom[i]) + 0.02 * top, f"{r['ratio']:.2f}x",
                    ha="center", fontsize=9)
    ax.set_xticks(x, [f"{r['label']}\n{r['ranks']} rank{'s' * (r['ranks'] > 1)}" for r in rows],
                  fontsize=8)
    ax.set_ylim(0, top * 1.45)
    ax.set_ylabel("MiB per rank (rank 0)")
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"{title}: predicted vs measured {labels()}", fontsize=10)
    return _finish(fig, path)


def plot_samples_per_s(rows, title: str = "Training speed", path=None):
    """Bars of samples/s per config (mean of the steady steps, error bar its 95 % CI; none where a
    run has no interval) with the ratio to stage 0 written beside each bar."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.6))
    names = [f"{r['label']} ({r['ranks']} rank{'s' * (r['ranks'] > 1)})" for r in rows][::-1]
    vals = [r.get("samples_per_s") or 0 for r in rows][::-1]
    errs = [r.get("samples_per_s_spread") for r in rows][::-1]
    errs = [e if e is not None and e == e else 0.0 for e in errs]
    bars = ax.barh(names, vals, xerr=errs, capsize=4, color="tab:purple")
    top = max([v + e for v, e in zip(vals, errs)] + [1e-9])
    for bar, r, e in zip(bars, rows[::-1], errs):
        rel = r.get("speed_vs_stage0")
        text = f"{bar.get_width():.2f}" + (f"  ({rel:.2f}x stage 0)" if rel else "")
        ax.text(bar.get_width() + e + 0.01 * top, bar.get_y() + bar.get_height() / 2, text,
                va="center", fontsize=9)
    ax.set_xlim(0, top * 1.5)
    ax.set_xlabel("samples/s, all ranks together, mean ± 95 % CI (higher is better)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"{title} {labels()}", fontsize=10)
    return _finish(fig, path)


def plot_loss_trajectories(rows, title: str = "Loss per step, averaged over ranks", path=None):
    """One line per run row (its `losses`): engines doing the same arithmetic lie on top of
    each other; the largest gap to the first row is written in the legend."""
    import matplotlib.pyplot as plt

    from dltutor.zero.fsdp import loss_gap
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ref = rows[0]["losses"]
    styles = ("-", "--", ":", "-.")
    for i, r in enumerate(rows):
        gap = loss_gap(r["losses"], ref)
        extra = f" (max rel. gap to {rows[0]['label']}: {gap:.1e})" if i else ""
        ax.plot(range(len(r["losses"])), r["losses"], styles[i % len(styles)], marker="o",
                lw=2, label=f"{r['label']}{extra}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("masked-LM loss (mean over ranks)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(f"{title} {labels()}", fontsize=10)
    return _finish(fig, path)
