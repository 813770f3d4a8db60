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
                      unit: float = GiB, unit_name: str = "GiB",
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
                   label=f"budget: {budget_mib:g} MiB per process (everything it allocates "
                         f"after start-up, not model states alone)")
    for i, r in enumerate(rows):
        if r.get("ratio"):
            ax.text(i, max(r["predicted"], bottom[i]) + 0.02 * top, ratio_label(r),
                    ha="center", fontsize=9)
    ax.set_xticks(x, [f"{r['label']}\n{r['ranks']} rank{'s' * (r['ranks'] > 1)}" for r in rows],
                  fontsize=8)
    ax.set_ylim(0, top * 1.45)
    ax.set_ylabel("MiB per rank (rank 0)")
    ax.legend(fontsize=8, loc="upper center", ncol=2)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(f"{title}: predicted vs measured {labels()}", fontsize=10)
    return _finish(fig, path)


def ratio_label(row: dict) -> str:
    """The text over a config's bars: measured / formula; with NVMe offload the formula is the
    no-offload one, so the ratio is the share of it still held in RAM, and the label says so."""
    if row.get("offload") == "nvme":
        return f"in RAM: {row['ratio']:.2f}\nof formula"
    return f"measured /\nformula {row['ratio']:.2f}"


def plot_samples_per_s(rows, title: str = "Training speed", path=None):
    """With rounds: each config's speed / stage 0's, paired within each round (geometric mean,
    error bar its 95 % interval: the interval the verdict uses; `runs.with_speed_ratio`), a line
    at 1. With one round: samples/s per config (mean of the steady steps ± 95 % CI)."""
    import matplotlib.pyplot as plt
    paired = [r for r in rows if r.get("speed_ci95")]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.6))
    names = [f"{r['label']} ({r['ranks']} rank{'s' * (r['ranks'] > 1)})" for r in rows][::-1]
    if paired:
        vals = [r.get("speed_vs_stage0") or 0 for r in rows][::-1]
        lo = [v - r["speed_ci95"][0] if r.get("speed_ci95") else 0 for v, r in zip(vals, rows[::-1])]
        hi = [r["speed_ci95"][1] - v if r.get("speed_ci95") else 0 for v, r in zip(vals, rows[::-1])]
        bars = ax.barh(names, vals, xerr=[lo, hi], capsize=4, color="tab:purple")
        ax.axvline(1.0, color="black", lw=1, ls="--")
        top = max([v + e for v, e in zip(vals, hi)] + [1.0])
        texts = [f"{v:.3f}" + (f" ({r['speed_ci95'][0]:.3f}-{r['speed_ci95'][1]:.3f})"
                                 if r.get("speed_ci95") else " (the reference)")
                 for v, r in zip(vals, rows[::-1])]
        errs = hi
        ax.set_xlabel("samples/s / stage 0's, paired within each round: geometric mean, "
                      "95 % CI over the rounds")
    else:
        vals = [r.get("samples_per_s") or 0 for r in rows][::-1]
        errs = [r.get("samples_per_s_spread") for r in rows][::-1]
        errs = [e if e is not None and e == e else 0.0 for e in errs]
        bars = ax.barh(names, vals, xerr=errs, capsize=4, color="tab:purple")
        top = max([v + e for v, e in zip(vals, errs)] + [1e-9])
        texts = [f"{v:.2f}" + (f"  ({r['speed_vs_stage0']:.2f}x stage 0, ratio of means)"
                               if r.get("speed_vs_stage0") else "") for v, r in zip(vals, rows[::-1])]
        ax.set_xlabel("samples/s, all ranks together, mean ± 95 % CI (higher is better)")
    for bar, text, e in zip(bars, texts, errs):
        ax.text(bar.get_width() + e + 0.01 * top, bar.get_y() + bar.get_height() / 2, text,
                va="center", fontsize=9)
    ax.set_xlim(0, top * 1.6)
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
