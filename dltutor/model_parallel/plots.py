"""Notebook 06's plots: the pipeline timeline, bubble vs micro-batches, TP checks and bytes."""
from __future__ import annotations

import numpy as np

from dltutor.core.plots import labels
from dltutor.model_parallel.pipeline import bubble_formula

COLORS = {"F": "tab:blue", "B": "tab:orange"}


def _save(fig, path):
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def plot_timeline(run: dict, ax=None, path=None, note: str = ""):
    """Which stage works on which micro-batch when: one row per stage, F blue, B orange."""
    import matplotlib.pyplot as plt
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.6 * run["stages"] + 1.6))
    start = min(e[2] for ev in run["events"] for e in ev)
    for s, ev in enumerate(run["events"]):
        for kind, mb, a, b in ev:
            ax.broken_barh([((a - start) * 1e3, (b - a) * 1e3)], (s - 0.4, 0.8),
                           color=COLORS[kind], edgecolor="black", linewidth=0.4)
            ax.text((a + b - 2 * start) / 2 * 1e3, s, f"{kind}{mb}", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(run["stages"]), [f"stage {s}" for s in range(run["stages"])])
    ax.invert_yaxis()
    ax.set_xlabel("time in the step (ms)")
    ax.set_title(f"{run['schedule']}, p={run['stages']}, m={run['m']}: bubble {run['bubble']:.2f} "
                 f"(formula {run['formula']:.2f}) {note}", fontsize=9)
    return _save(fig, path) if fig else ax


def plot_timelines(runs: list, path=None, note: str = ""):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, sum(0.6 * r["stages"] + 1.3 for r in runs)))
    for ax, r in zip(np.atleast_1d(axes), runs):
        plot_timeline(r, ax=ax, note=note)
    fig.suptitle("Pipeline timeline (F = forward, B = backward of micro-batch k) " + labels(), fontsize=10)
    return _save(fig, path)


def plot_bubble(rows: list, path=None, note: str = ""):
    """Measured bubble per (schedule, m) as points (mean of the steps ± 95 % CI), the formula
    (p-1)/(m+p-1) as a line."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for p in sorted({r["stages"] for r in rows}):
        ms = np.arange(1, max(r["m"] for r in rows) + 1)
        ax.plot(ms, [bubble_formula(p, int(m)) for m in ms], "-", color="grey",
                label=f"(p-1)/(m+p-1), p={p}")
        for sched, marker in (("gpipe", "o"), ("1f1b", "s")):
            pts = [r for r in rows if r["stages"] == p and r["schedule"] == sched]
            if pts:
                ax.errorbar([r["m"] for r in pts], [r["measured"] for r in pts],
                            yerr=[r.get("spread", float("nan")) for r in pts], fmt=marker, ms=7, capsize=3,
                            label=f"{sched} measured (mean ± 95 % CI), p={p}")
                for r in pts:
                    ax.annotate(f"{r['measured']:.2f}", (r["m"], r["measured"]), fontsize=7,
                                xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble: idle share of the step")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(f"Pipeline bubble vs micro-batches {note} {labels()}", fontsize=9)
    return _save(fig, path)


def plot_tp(rows: list, path=None, tolerance: float = 1e-5):
    """Left: the largest errors (log scale) of each TP check; right: bytes counted vs formula."""
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    names = [f"{r['block']}, {r['ranks']} ranks" for r in rows]
    keys = ("out err", "grad err", "DTensor err", "ours vs DTensor")
    y = np.arange(len(rows))
    for i, k in enumerate(keys):
        vals = [max(r[k], 1e-12) for r in rows]
        a1.barh(y + i * 0.2, vals, 0.2, label=k)
    a1.set_xscale("log")
    a1.axvline(tolerance, color="red", ls="--", label=f"tests' tolerance {tolerance:g}")
    a1.set_yticks(y + 0.3, names)
    a1.set_xlabel("max |difference| (fp32)")
    a1.legend(fontsize=7)
    a1.set_title("split block vs whole block " + labels(), fontsize=9)
    a2.barh(y, [r["bytes each"] for r in rows], 0.4, label="counted (per all-reduce)")
    a2.barh(y + 0.4, [r["formula bytes"] for r in rows], 0.4, label="tokens x d_model x 4 B")
    a2.set_yticks(y + 0.2, names)
    a2.set_xlabel("bytes per all-reduce")
    a2.legend(fontsize=7, loc="lower right", framealpha=0.9)
    a2.set_title("what one all-reduce moves", fontsize=9)
    return _save(fig, path)


HATCH = {"counted": "", "derived from shapes": "//", "formula only (not run)": "xx"}


def plot_bytes(forms: dict, title: str, path=None, unit: float = 2**30, unit_name: str = "GiB",
               kinds: dict | None = None):
    """Bars of bytes per step per GPU for each form (dict form -> bytes), log scale. `kinds`
    (form -> 'counted' / 'derived from shapes' / 'formula only (not run)') hatches each bar by
    where its number comes from, with a legend."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    fig, ax = plt.subplots(figsize=(7, 2.8))
    names = list(forms)
    vals = [forms[n] / unit for n in names]
    bars = ax.barh(names, vals, color=["tab:red", "tab:green", "tab:blue"][:len(names)])
    for name, bar, v in zip(names, bars, vals):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {v:,.3g} {unit_name}",
                va="center", fontsize=8)
        if kinds:
            bar.set_hatch(HATCH.get(kinds[name], ".."))
            bar.set_edgecolor("black")
    if kinds:
        ax.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch=HATCH.get(k, ".."), label=k)
                           for k in dict.fromkeys(kinds.values())], fontsize=7, loc="lower right")
    ax.set_xscale("log")
    ax.set_xlabel(f"{unit_name} sent per GPU per step")
    ax.set_title(title, fontsize=9)
    return _save(fig, path)
