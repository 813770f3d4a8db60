"""Notebook 03's pictures of set-ups launched in rounds: every launch as a dot (its round's colour),
and the interval each verdict uses: the ratio paired by round (`paired.ratio`), over the rounds.

    plot_engines(hvd_pool, ddp_pool, label)         img/s per launch; Horovod / DDP per round
    plot_sweeps_by_round(pools, launches, label)    each sweep value's step time over the lab's
"""
from __future__ import annotations

from dltutor.horovod import paired

ROUND_COLOURS = ["tab:red", "tab:orange", "tab:olive", "tab:cyan", "tab:purple", "tab:brown"]


def _colour(r: int) -> str:
    return ROUND_COLOURS[(r - 1) % len(ROUND_COLOURS)]


def _ratio_bar(ax, x: float, r: dict, colour: str) -> None:
    """The ratio's mean and its 95 % interval (asymmetric), and each round's ratio as a dot."""
    lo, hi = r["lo"], r["hi"]
    err = None if lo != lo else [[r["mean"] - lo], [hi - r["mean"]]]
    ax.errorbar([x], [r["mean"]], yerr=err, fmt="s", color=colour, capsize=8, ms=8, zorder=3)
    for k, v in zip(r["rounds"], r["ratios"]):
        ax.plot([x + 0.12], [v], "o", color=_colour(k), ms=5, zorder=4)


def plot_engines(hvd_pool: dict, ddp_pool: dict, label: str):
    """Left: each launch's total img/s, joined within a round. Right: Horovod / DDP per round and
    the paired 95 % interval the finding uses (line at 1: no difference)."""
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    h, d = hvd_pool["round_img_sec"], ddp_pool["round_img_sec"]
    for k in sorted(set(h) & set(d)):
        left.plot([0, 1], [h[k], d[k]], "-o", color=_colour(k), label=f"round {k}")
    left.set_xticks([0, 1], ["Horovod (lab settings)", "DDP"])
    left.set_xlim(-0.5, 1.5)
    left.set_ylabel("img/s (all workers), one dot per launch")
    left.set_title("each launch, joined within its round")
    left.legend(fontsize=8)
    r = paired.ratio(h, d)
    _ratio_bar(right, 0.0, r, "tab:blue")
    right.axhline(1.0, color="gray", ls="--", lw=1)
    right.set_xticks([0.0], ["Horovod / DDP"])
    right.set_xlim(-0.6, 0.6)
    right.set_ylabel("ratio of img/s in the same round")
    right.set_title("the verdict's interval: mean ratio,\n95 % CI over the rounds (dots: each round)")
    fig.suptitle(f"Horovod vs DDP, same work, launched in rotated rounds -- {label}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_sweeps_by_round(pools: dict, launches: dict, label: str):
    """One panel per sweep: each value's step time over the lab's value's in the same round, its
    paired 95 % interval (squares, error bars) and each round's ratio (dots)."""
    import matplotlib.pyplot as plt

    from dltutor.horovod import rounds
    from dltutor.horovod.plots import fusion_label
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    panels = (("fusion_threshold_bytes", "HOROVOD_FUSION_THRESHOLD", lambda v: fusion_label(int(v))),
              ("cycle_time_ms", "HOROVOD_CYCLE_TIME", lambda v: f"{v:g} ms"))
    n = max(len(v) for v in launches.values())
    for ax, (key, name, fmt) in zip(axes, panels):
        ratios = rounds.sweep_ratios(pools, launches, key)
        for i, (_, r) in enumerate(ratios):
            _ratio_bar(ax, i, r, "tab:purple")
        ax.axhline(1.0, color="indigo", ls="--", lw=1.2,
                   label=f"the lab's {fmt(pools[rounds.LAB][key])} (ratio 1)")
        ax.set_xticks(range(len(ratios)), [fmt(v) for v, _ in ratios])
        ax.set_xlim(-0.6, max(len(ratios), 1) - 0.4)
        ax.set_xlabel(name)
        ax.set_ylabel("step time / the lab's, same round")
        ax.set_title(f"{name}: mean ratio and 95 % CI over {n} round(s);\n"
                     "dots: each round (red 1st, orange 2nd, olive 3rd)", fontsize=9)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"Horovod settings launched in rotated rounds with each other and DDP (order rotated "
                 f"by one each round) -- {label}", fontsize=10)
    fig.tight_layout()
    return fig
