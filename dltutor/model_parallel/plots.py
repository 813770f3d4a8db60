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
    bubbles = run.get("bubbles") or [run["bubble"]]
    ax.set_title(f"{run['schedule']}, p={run['stages']}, m={run['m']}: the median of {len(bubbles)} steps, "
                 f"its bubble {run['bubble']:.2f} (mean of the steps {sum(bubbles) / len(bubbles):.2f}, "
                 f"formula {run['formula']:.2f}) {note}", fontsize=9)
    return _save(fig, path) if fig else ax


def plot_timelines(runs: list, path=None, note: str = ""):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, sum(0.6 * r["stages"] + 1.3 for r in runs)))
    for ax, r in zip(np.atleast_1d(axes), runs):
        plot_timeline(r, ax=ax, note=note)
    fig.suptitle("Pipeline timeline (F = forward, B = backward of micro-batch k) " + labels(), fontsize=10)
    return _save(fig, path)


FORMULA_STYLE = {2: ("black", "-"), 4: ("tab:purple", "--"), 8: ("tab:brown", ":")}
# measured points: colours none of the formula lines use, one per (run, p, schedule)
POINT_COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:olive", "tab:cyan", "tab:pink", "tab:gray"]
# value labels: right of the point (never over the y ticks), GPipe above, 1F1B below; the real run further out
OFFSETS = {("", "gpipe"): (6, 3), ("", "1f1b"): (6, -10), ("none", "gpipe"): (6, 12), ("none", "1f1b"): (6, -19)}
DODGE = {"gpipe": 0.93, "1f1b": 1.07}     # x nudged apart on the log axis: squares do not hide circles


def plot_bubble(rows: list, path=None, note: str = "", real_rows=None, real_note: str = "real compute"):
    """Measured bubble per (schedule, m) as points (mean of the steps ± 95 % CI), the formula
    (p-1)/(m+p-1) as one line per p (its own colour and dash); `real_rows` (the real-compute run)
    as hollow points. Points take colours no formula line uses; GPipe's sit a little left of m and
    1F1B's a little right, each value written right of its point (GPipe above, 1F1B below)."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.6))
    everything = list(rows) + list(real_rows or [])
    ms = np.arange(1, max(r["m"] for r in everything) + 1)
    for p in sorted({r["stages"] for r in everything}):
        color, dash = FORMULA_STYLE.get(p, ("grey", "-."))
        ax.plot(ms, [bubble_formula(p, int(m)) for m in ms], dash, color=color, label=f"(p-1)/(m+p-1), p={p}")
    sets = [(rows, note, "", 7)] + ([(real_rows, real_note, "none", 8)] if real_rows else [])
    colors = iter(POINT_COLORS * 4)
    for pts_all, what, face, size in sets:
        for p in sorted({r["stages"] for r in pts_all}):
            for sched, marker in (("gpipe", "o"), ("1f1b", "s")):
                pts = [r for r in pts_all if r["stages"] == p and r["schedule"] == sched]
                if not pts:
                    continue
                color, nudge = next(colors), DODGE[sched]
                bar = ax.errorbar([r["m"] * nudge for r in pts], [r["measured"] for r in pts],
                                  yerr=[r.get("spread", float("nan")) for r in pts], fmt=marker, ms=size,
                                  capsize=3, color=color, label=f"{sched}, p={p}, {what} (mean ± 95 % CI)")
                if face == "none":
                    bar[0].set_markerfacecolor("none")
                for r in pts:
                    ax.annotate(f"{r['measured']:.2f}", (r["m"] * nudge, r["measured"]), fontsize=7,
                                color=color, xytext=OFFSETS[(face, sched)], textcoords="offset points")
    ax.set_xscale("log", base=2)
    ax.set_xlim(0.8, 1.5 * max(ms))
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble: idle share of the step")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"Pipeline bubble vs micro-batches {labels()}", fontsize=9)
    return _save(fig, path)


def _counts(text: str) -> tuple[int, int]:
    fwd, bwd = text.split("/")
    return int(fwd), int(bwd)


def plot_tp(rows: list, path=None, tolerance: float = 1e-5):
    """Left: the largest errors (log scale) of each TP check; right: the all-reduces each block
    made, forward and backward, ours beside torch's DTensor plan (Megatron: one each way)."""
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
    names = [f"{r['block']}, {r['ranks']} ranks" for r in rows]
    keys = ("out err", "dx err", "grad err", "DTensor err", "ours vs DTensor")
    y = np.arange(len(rows))
    for i, k in enumerate(keys):
        vals = [max(r.get(k, 0.0), 1e-12) for r in rows]
        a1.barh(y + i * 0.16, vals, 0.16, label=k)
    a1.set_xscale("log")
    a1.axvline(tolerance, color="red", ls="--", label=f"relative fp32 tolerance {tolerance:g} (chosen)")
    a1.set_yticks(y + 0.32, names)
    a1.set_xlabel("max |difference| / max |whole block's value| (fp32)")
    a1.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    a1.set_title("split block vs whole block, relative errors " + labels(), fontsize=9)
    bars = [("ours, forward", "all-reduces fwd/bwd", 0), ("ours, backward", "all-reduces fwd/bwd", 1),
            ("DTensor, forward", "DTensor fwd/bwd", 0), ("DTensor, backward", "DTensor fwd/bwd", 1)]
    for i, (label, key, j) in enumerate(bars):
        a2.barh(y + i * 0.2, [_counts(r[key])[j] for r in rows], 0.2, label=label,
                hatch="//" if "DTensor" in label else "")
    a2.axvline(1, color="black", ls=":", label="Megatron: one each way")
    a2.set_yticks(y + 0.3, names)
    a2.set_xlabel("all-reduces per block (counted in the run)")
    a2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)
    a2.set_title("all-reduces per block: ours vs torch's DTensor plan", fontsize=9)
    return _save(fig, path)


HATCH = {"counted": "", "derived from shapes": "//", "formula only (not run)": "xx"}


def plot_bytes(forms: dict, title: str, path=None, unit: float = 2**30, unit_name: str = "GiB",
               kinds: dict | None = None, xlabel: str = "sent per GPU per step"):
    """Bars of bytes per step per GPU for each form (dict form -> bytes), a LINEAR axis so that
    bar lengths compare as the numbers do (each bar also carries its value). `kinds`
    (form -> 'counted' / 'derived from shapes' / 'formula only (not run)') hatches each bar by
    where its number comes from, with a legend."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    fig, ax = plt.subplots(figsize=(7, 2.8))
    names = list(forms)
    vals = [forms[n] / unit for n in names]
    bars = ax.barh(names, vals, color=["tab:red", "tab:green", "tab:blue"][:len(names)])
    for name, bar, v in zip(names, bars, vals):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {v:,.0f} {unit_name}" if v >= 100 else f" {v:.3g} {unit_name}",
                va="center", fontsize=8)
        if kinds:
            bar.set_hatch(HATCH.get(kinds[name], ".."))
            bar.set_edgecolor("black")
    if kinds:
        ax.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch=HATCH.get(k, ".."), label=k)
                           for k in dict.fromkeys(kinds.values())], fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
    ax.set_xlim(0, 1.3 * max(vals))
    ax.set_xlabel(f"{unit_name} {xlabel}")
    ax.set_title(title, fontsize=9)
    return _save(fig, path)
