"""Plots for notebook 02: scaling efficiency, warm-up loss curves, step time vs gradient buckets,
accuracy and steps-to-target vs global batch (`plot_batch_study`), one DDP step as a Gantt
timeline of compute and all-reduce lanes (`plot_timeline`).

Titles carry the honest labels of `dltutor.core.plots.labels` (SYNTHETIC data, CPU/gloo or GPU/nccl,
fast mode). Each function returns the figure and saves it when `path` is given.
"""
from __future__ import annotations

from dltutor.core.plots import labels
from dltutor.core.spread import decided


def _err(h) -> float:
    """An error bar's half-length: the 95 % CI, or no bar (0) where a run has no interval."""
    return float(h) if decided(h) else 0.0


def _finish(fig, title, data, path):
    fig.suptitle(f"{title} {labels(data)}")
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=100)
    return fig


def plot_scaling(rows: list[dict], title: str = "Data-parallel scaling", data=None, path=None):
    """Left: global img/s per run (ranks x per-rank batch). Right: weak and strong efficiency.

    `rows` come from `dltutor.ddp.scaling.scaling_table` (keys world_size, scaling, per_rank_batch,
    global_img_per_s, speedup, efficiency, rate_spread). Error bars: mean ± 95 % CI (the
    efficiency's combines both rates', `dltutor.ddp.findings._eff_spread`); none without one.
    """
    from dltutor.ddp.findings import _eff_spread
    import matplotlib.pyplot as plt
    fig, (ax_p, ax_e) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"weak": "tab:blue", "strong": "tab:orange"}
    seen, names, values, cols, errs = set(), [], [], [], []
    for r in rows:  # one bar per distinct run (the 2-rank run can be in both groups)
        key = (r["world_size"], r["per_rank_batch"])
        if key in seen:
            continue
        seen.add(key)
        names.append(f"{r['world_size']} rank{'s' if r['world_size'] > 1 else ''}\n"
                     f"b={r['per_rank_batch']}, B={r['world_size'] * r['per_rank_batch']}")
        values.append(r["global_img_per_s"])
        errs.append(_err(r.get("rate_spread")))
        cols.append("tab:green" if r["world_size"] > 1 else "tab:grey")
    bars = ax_p.bar(names, values, color=cols, yerr=errs, capsize=4)
    for bar, v in zip(bars, values):
        ax_p.text(bar.get_x() + bar.get_width() / 2, v, f"{v:,.0f}", ha="center", va="bottom")
    ax_p.set(ylabel="global images/s, mean ± 95 % CI", title="Throughput (higher is better)")
    for kind in ("weak", "strong"):
        group = sorted((r for r in rows if r["scaling"] == kind), key=lambda r: r["world_size"])
        if group:
            ax_e.errorbar([r["world_size"] for r in group], [r["efficiency"] for r in group],
                          yerr=[0.0] + [_err(_eff_spread(r, group[0])) for r in group[1:]], fmt="o-",
                          capsize=4, color=colors[kind], label=f"{kind} scaling (± 95 % CI)")
            for r in group:
                ax_e.annotate(f"{r['efficiency']:.2f}", (r["world_size"], r["efficiency"]),
                              textcoords="offset points", color=colors[kind],   # weak above, strong below
                              xytext=(6, 6) if kind == "weak" else (6, -14))
    ax_e.axhline(1.0, color="grey", ls=":", label="ideal")
    ax_e.set(xlabel="ranks (processes)", ylabel="efficiency  P_W / (P_1 x W)",
             title="Scaling efficiency (1.0 = ideal)", ylim=(0, 1.25))
    ax_e.set_xticks(sorted({r["world_size"] for r in rows}))
    for ax in (ax_p, ax_e):
        ax.grid(alpha=0.3)
    ax_e.legend(fontsize=8)
    return _finish(fig, title, data, path)


def plot_loss_curves(curves: dict, title: str = "Large global batch: warm-up or not", lrs=None,
                     data=None, path=None):
    """Training loss per step for each labelled run; `lrs` (same labels) adds the LR schedule."""
    import matplotlib.pyplot as plt
    n = 2 if lrs else 1
    fig, axes = plt.subplots(1, n, figsize=(5.5 * n, 4))
    axes = list(axes) if n > 1 else [axes]
    for label, curve in curves.items():
        axes[0].plot(range(1, len(curve) + 1), curve, label=label)
    axes[0].set(xlabel="step", ylabel="training loss (mean over ranks)", title="Loss (lower is better)")
    if lrs:
        for label, lr in lrs.items():
            axes[1].plot(range(1, len(lr) + 1), lr, label=label)
        axes[1].set(xlabel="step", ylabel="learning rate", title="LR schedule")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _finish(fig, title, data, path)


def plot_step_times(rows: list[dict], title: str = "Gradient buckets and overlap", data=None,
                    path=None):
    """Bars of step time per variant (`label`, `step_time_ms`, optional `spread_ms`, its 95 % CI, as
    error bars: `dltutor.ddp.findings.step_row`, the slowest rank's mean); shorter is better."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(rows) + 1.8))
    paired = all("ratio_to_ref" in r for r in rows)   # `rounds.with_ratios`: the verdict's interval
    key, err = ("ratio_to_ref", "ratio_spread") if paired else ("step_time_ms", "spread_ms")
    names = [r["label"] for r in rows][::-1]
    values = [r[key] for r in rows][::-1]
    spreads = [_err(r.get(err)) for r in rows][::-1]
    bars = ax.barh(names, values, xerr=spreads, capsize=4,
                   color=["tab:red" if "no overlap" in n else "tab:blue" for n in names])
    top = max(v + e for v, e in zip(values, spreads))
    for bar, v, e in zip(bars, values, spreads):   # the label right of the whisker, never struck
        ax.text(v + e + 0.01 * top, bar.get_y() + bar.get_height() / 2,
                f"{v:.2f}x" if paired else f"{v:.1f} ms", va="center")
    ax.set_xlim(0, top * 1.3)
    if paired:
        ax.axvline(1.0, color="grey", ls="--", lw=1)
        ax.set(xlabel="step time over the reference's in the same round, mean ± 95 % CI over rounds "
                      "(lower is faster)")
    else:
        ax.set(xlabel="step time of the slowest rank, mean ± 95 % CI (ms, lower is better)")
    ax.grid(axis="x", alpha=0.3)
    return _finish(fig, title, data, path)


def plot_batch_study(gap: list[dict], scaling: list[dict], title: str = "Large global batches",
                     data=None, path=None):
    """Left: test accuracy vs global batch per LR policy (`batch_study.gap_rows`), same epochs
    each. Right: steps to the target accuracy vs global batch, log-log, beside perfect scaling
    (`batch_study.scaling_rows`); a run that never reached the target is an open triangle at the
    steps it ran."""
    import matplotlib.pyplot as plt
    from dltutor.ddp.batch_study import POLICY_TEXT
    fig, (ax_a, ax_s) = plt.subplots(1, 2, figsize=(11.5, 4.3))
    batches = [r["global_batch"] for r in gap]
    for policy, text in POLICY_TEXT.items():
        ys = [r.get(policy) for r in gap]
        if any(y is not None for y in ys):
            ax_a.plot(batches, ys, "o-", label=text)
    ax_a.axhline(gap[0][next(p for p in POLICY_TEXT if gap[0].get(p) is not None)], color="grey",
                 ls=":", label=f"smallest batch ({batches[0]})")
    ax_a.set(xlabel="global batch B (images per step)", ylabel="test accuracy after the same epochs",
             title="Same epochs, bigger batch (higher is better)")
    xs = [r["global_batch"] for r in scaling]
    hit = [r for r in scaling if r["steps_to_target"]]
    ax_s.plot([r["global_batch"] for r in hit], [r["steps_to_target"] for r in hit], "o-",
              color="tab:green", label=f"measured ({POLICY_TEXT['scaled+warmup']})")
    missed = [r for r in scaling if not r["steps_to_target"]]
    if missed:
        ax_s.plot([r["global_batch"] for r in missed], [r["steps_run"] for r in missed], "^",
                  mfc="none", color="tab:red", ms=9, label="not reached (steps run)")
    if scaling[0]["perfect_scaling"]:
        ax_s.plot(xs, [r["perfect_scaling"] for r in scaling], "--", color="grey",
                  label="perfect scaling (2x batch, 1/2 steps)")
    ax_s.set_yscale("log")
    ax_s.set(xlabel="global batch B (images per step)", ylabel="optimizer steps",
             title=f"Steps to {scaling[0]['target']:.1%} test accuracy (lower is better)")
    for ax in (ax_a, ax_s):
        ax.set_xscale("log", base=2)
        ax.set_xticks(batches, [f"{b}\n{r['steps']} steps" if ax is ax_a else str(b)
                                for b, r in zip(batches, gap)])
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    return _finish(fig, title, data, path)


def plot_timeline(steps: dict, title: str = "One DDP step: compute and all-reduce lanes", data=None,
                  path=None):
    """Gantt chart, two lanes per variant: forward and backward (compute), each bucket's all-reduce.

    `steps` maps a label to one step's parts (`dltutor.ddp.timeline.step_parts(...)[k]`); times are
    drawn in ms from the step's start, the step's end as a black tick.
    """
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(11, 0.9 * len(steps) + 1.6))
    names, y = [], 0
    for label, parts in steps.items():
        t0 = parts["step"][0]
        lanes = ((f"{label}\ncompute", (("forward", "tab:blue"), ("backward", "tab:orange"))),
                 (f"{label}\nall-reduce", (("comm", "tab:green"),)))
        for lane, kinds in lanes:
            for kind, color in kinds:
                ax.broken_barh([((s - t0) / 1e3, (e - s) / 1e3) for s, e in parts[kind]], (y - 0.35, 0.7),
                               facecolors=color, linewidth=0, label=kind)
            ax.plot([(parts["step"][1] - t0) / 1e3] * 2, [y - 0.45, y + 0.45], color="black", lw=1.5)
            names.append(lane)
            y += 1
    handles = dict(zip(*ax.get_legend_handles_labels()[::-1]))
    ax.legend(handles.values(), handles.keys(), fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="ms from the start of the step (black tick: step done)")
    ax.grid(axis="x", alpha=0.3)
    return _finish(fig, title, data, path)
