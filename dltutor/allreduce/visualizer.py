"""The ring all-reduce visualizer (ipywidgets 8) and the plots of notebook 05.

`RingVisualizer(n=8).widget` shows the ranks x chunks grid of `dltutor.allreduce.ring` one step at a
time, labelled as on the seed's slides (letter = the rank's data, digit = the chunk): N slider, step
slider, Prev / Next / Play, the phase ("reduce-scatter step 3 of 7 (the slides' Reduce Phase)"),
every message in flight, bytes sent so far and the α-β modelled elapsed time.
Stable hooks for browser tests: CSS classes `dltutor-ring` (whole widget), `dltutor-ring-phase`
(phase text), `dltutor-ring-grid`, `dltutor-ring-next`, `dltutor-ring-prev`, buttons described
"Next" / "Prev", and the step slider described "step".
"""
from __future__ import annotations

import html

from dltutor.allreduce.ring import label, rank_letter, ring_steps
from dltutor.core.units import MiB, fmt_bytes

OWN, FULL = "#f2f2f2", "#2e8b57"
PARTIAL = ((255, 227, 163), (232, 120, 30))  # 2 contributions -> N-1 contributions


def cell_colour(k: int, n: int) -> str:
    """Background for a chunk holding k of n contributions: grey (own), amber ramp, green (all)."""
    if k >= n:
        return FULL
    if k <= 1:
        return OWN
    f = 0.0 if n <= 3 else (k - 2) / (n - 3)
    rgb = [round(a + f * (b - a)) for a, b in zip(*PARTIAL)]
    return "#%02x%02x%02x" % tuple(rgb)


def fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"


def grid_html(state, max_terms: int | None = None) -> str:
    """An HTML table: one row per rank, one column per chunk, the seed's labels in the cells."""
    n = state.n
    if max_terms is None:
        max_terms = n if n <= 4 else 3
    arrived = {(m.dst, m.chunk) for m in state.sends}
    head = "".join(f"<th style='padding:2px 6px'>chunk {c}</th>" for c in range(n))
    rows = []
    for r in range(n):
        cells = []
        for c in range(n):
            k = len(state.held[r][c])
            full = html.escape(state.label(r, c))
            border = "2px solid #1f4e9c" if (r, c) in arrived else "1px solid #ccc"
            colour = "white" if k >= n else "black"
            cells.append(f"<td title='{full}' style='background:{cell_colour(k, n)};color:{colour};"
                         f"border:{border};padding:2px 5px;white-space:nowrap;text-align:center'>"
                         f"{html.escape(state.label(r, c, max_terms=max_terms))}</td>")
        rows.append(f"<tr><th style='padding:2px 6px'>P{r}</th>{''.join(cells)}</tr>")
    legend = (f"<span style='background:{OWN};padding:0 6px'>own data</span> "
              f"<span style='background:{cell_colour(2, max(n, 4))};padding:0 6px'>partial sum</span> "
              f"<span style='background:{FULL};color:white;padding:0 6px'>all {n} ranks summed</span> "
              "<span style='border:2px solid #1f4e9c;padding:0 6px'>arrived this step</span> "
              f"&nbsp;P0..: ranks; letter = whose data (A = P0's, {rank_letter(n - 1)} = P{n - 1}'s), "
              "digit = chunk: A6+H6+G6 = chunk 6 summed over P0, P7, P6; A6…H6 = over all ranks")
    return ("<div class='dltutor-ring-table' style='font:11px/1.3 monospace;overflow-x:auto'>"
            "<table style='border-collapse:collapse'>"
            f"<tr><th></th>{head}</tr>{''.join(rows)}</table>"
            f"<div style='margin-top:4px;font-size:10px'>{legend}</div></div>")


def links_html(state, max_terms: int = 3) -> str:
    """The message on each link during the step that led to `state`."""
    if not state.sends:
        return "<i>no message yet: press Next</i>"
    verb = "adds" if state.phase == "reduce-scatter" else "stores"
    items = "".join(
        f"<li>P{m.src} → P{m.dst}: {html.escape(label(m.chunk, m.contrib, max_terms=max_terms, n=state.n))}"
        f" ({fmt_bytes(m.nbytes)}), P{m.dst} {verb} it</li>" for m in state.sends)
    return (f"<div style='font:11px/1.35 monospace'><b>in flight this step</b>"
            f"<ul style='columns:2;margin:2px 0;padding-left:18px'>{items}</ul></div>")


class RingVisualizer:
    """Step through ring all-reduce; `.widget` is the ipywidgets box to display."""

    def __init__(self, n: int = 8, step: int = 0, nbytes: float = 64 * MiB,
                 alpha: float = 10e-6, bandwidth: float = 10e9, itemsize: int = 4):
        import ipywidgets as W
        self.itemsize = itemsize
        style = {"description_width": "110px"}
        lay = W.Layout(width="420px")
        self.n = W.IntSlider(n, 2, 16, description="ranks N", style=style, layout=lay)
        self.step = W.IntSlider(step, 0, 2 * (n - 1), description="step", style=style, layout=lay)
        self.prev = W.Button(description="Prev", icon="step-backward", layout=W.Layout(width="80px"))
        self.next = W.Button(description="Next", icon="step-forward", layout=W.Layout(width="80px"))
        self.play = W.Play(value=step, min=0, max=2 * (n - 1), interval=1200, description="Play")
        W.jslink((self.play, "value"), (self.step, "value"))
        self.size = W.FloatLogSlider(nbytes, base=2, min=10, max=30, step=1,
                                     description="D (bytes)", style=style, layout=lay)
        self.alpha = W.FloatLogSlider(alpha * 1e6, base=10, min=-1, max=3, step=0.1,
                                      description="α latency (µs)", style=style, layout=lay)
        self.bw = W.FloatLogSlider(bandwidth / 1e9, base=10, min=-1, max=3, step=0.1,
                                   description="1/β bw (GB/s)", style=style, layout=lay)
        self.phase = W.HTML()
        self.grid = W.HTML()
        self.links = W.HTML()
        self.stats = W.HTML()
        for w, cls in ((self.phase, "phase"), (self.grid, "grid"), (self.next, "next"),
                       (self.prev, "prev"), (self.step, "step"), (self.n, "n"), (self.stats, "stats")):
            w.add_class(f"dltutor-ring-{cls}")
        self.prev.on_click(lambda _: self.go(-1))
        self.next.on_click(lambda _: self.go(+1))
        self.n.observe(self._on_n, "value")
        for w in (self.step, self.size, self.alpha, self.bw):
            w.observe(lambda _: self.render(), "value")
        controls = W.VBox([W.HBox([self.prev, self.next, self.play]), self.n, self.step,
                           self.size, self.alpha, self.bw])
        self.widget = W.VBox([W.HBox([controls, self.stats]), self.phase, self.grid, self.links])
        self.widget.add_class("dltutor-ring")
        self._cache = {}
        self.render()

    # -- model ---------------------------------------------------------------------------------
    def states(self):
        n, d = self.n.value, int(self.size.value)
        key = (n, d, self.alpha.value, self.bw.value)
        if key not in self._cache:
            self._cache = {key: ring_steps(n, max(1, d // self.itemsize), self.itemsize,
                                           alpha=self.alpha.value * 1e-6, beta=1 / (self.bw.value * 1e9))}
        return self._cache[key]

    @property
    def state(self):
        return self.states()[self.step.value]

    # -- actions -------------------------------------------------------------------------------
    def go(self, delta: int) -> None:
        self.step.value = max(0, min(self.step.max, self.step.value + delta))

    def _on_n(self, change) -> None:
        top = 2 * (change["new"] - 1)
        self.step.value = min(self.step.value, top)
        self.step.max = self.play.max = top
        self.render()

    def render(self) -> None:
        states, st = self.states(), self.state
        n, last = st.n, self.states()[-1]
        colour = {"start": "#555", "reduce-scatter": "#b35900", "all-gather": "#1f6e43"}[st.phase]
        self.phase.value = (f"<div class='dltutor-ring-phase-text' style='font-size:15px;"
                            f"font-weight:bold;color:{colour}'>{html.escape(st.phase_text)}"
                            f" &nbsp;·&nbsp; overall step {st.index} of {len(states) - 1}</div>")
        self.grid.value = grid_html(st)
        self.links.value = links_html(st)
        d = int(self.size.value)
        rows = [("data per rank D", fmt_bytes(d)),
                ("chunk D/N", fmt_bytes(d / n)),
                ("sent by one rank so far", f"{fmt_bytes(st.bytes_per_rank)} of {fmt_bytes(last.bytes_per_rank)}"
                                            " = 2(N−1)/N·D"),
                ("sent on all links so far", fmt_bytes(st.bytes_total)),
                ("modelled time so far", f"{fmt_time(st.elapsed)} of T = {fmt_time(last.elapsed)}"),
                ("T = 2(N−1)α + 2(N−1)/N·Dβ", f"{2 * (n - 1)}·α + {2 * (n - 1) / n:.3f}·D·β")]
        self.stats.value = ("<table style='font:12px monospace;margin-left:16px'>" + "".join(
            f"<tr><td style='padding-right:10px'>{k}</td><td><b>{v}</b></td></tr>" for k, v in rows)
            + "</table>")

    def _ipython_display_(self):
        from IPython.display import display
        display(self.widget)


def ring_visualizer(n: int = 8, **kw):
    """Build and return the widget (a `RingVisualizer`; display it or its `.widget`)."""
    return RingVisualizer(n=n, **kw)


# ---- plots of the measured sweep (summaries from dltutor.allreduce.collectives.measure_allreduce) -------
COLOURS = {"ring": "#1f77b4", "gloo": "#2ca02c", "reduce_bcast": "#d62728",
           "recursive_doubling": "#9467bd", "tree": "#8c564b", "tree_pipelined": "#e377c2"}


def _note(summary) -> str:
    from dltutor.core.env import fast_mode
    return f"{summary.get('hardware', '?')}{', fast mode' if fast_mode() else ''}"


def _style(ax, ylabel: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_locator(LogLocator(base=4))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_bytes(x)))
    ax.set_xlabel("message size D")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.figure.tight_layout()


def plot_busbw(summaries: dict, ax=None):
    """Bus bandwidth vs message size, one line per algorithm and rank count (summaries[N]): the
    median pass, a bar from the slowest to the fastest pass; the title says when even the fastest
    passes were disturbed (`paired.fastest_inversions`) and that busbw = algbw at N = 2."""
    import matplotlib.pyplot as plt
    import numpy as np
    from dltutor.allreduce import paired
    from dltutor.allreduce.cost import busbw
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.3))
    for (n, s), ls in zip(sorted(summaries.items()), ("-", "--", ":", "-.")):
        for alg in sorted({r["algorithm"] for r in s["results"]}):
            rows = sorted((r for r in s["results"] if r["algorithm"] == alg), key=lambda r: r["bytes"])
            d = np.array([r["bytes"] for r in rows], float)
            ts = [np.array(r.get("times_s") or [r["time_s"]], float) for r in rows]
            mid = busbw(d, np.array([np.median(t) for t in ts]), n) / 1e9
            lo, hi = busbw(d, np.array([t.max() for t in ts]), n) / 1e9, busbw(d, np.array([t.min() for t in ts]), n) / 1e9
            ax.errorbar(d, mid, yerr=[mid - lo, hi - mid], fmt=ls, marker="o", ms=4, capsize=2,
                        color=COLOURS.get(alg), label=f"{alg}, N={n}")
    notes = ["N = 2: busbw = algbw"] if 2 in summaries else []
    if any(paired.fastest_inversions(s["results"]) for s in summaries.values()):
        notes.append("even the fastest passes were disturbed (see the table)")
    ax.set_title(f"All-reduce bus bandwidth: median pass, bar from slowest to fastest pass "
                 f"({_note(next(iter(summaries.values())))})" + ("\n" + "; ".join(notes) if notes else ""),
                 fontsize=10)
    _style(ax, "bus bandwidth (GB/s)")
    return ax


def fit_note(summary: dict, alpha: float, beta: float) -> str:
    """'' for a usable ring fit; else ': fit UNUSABLE (misses its own 1 KiB point by 9.5x)'."""
    from dltutor.allreduce.fitcheck import check
    c = check(summary, alpha, beta)
    return "" if c["usable"] else f": fit UNUSABLE (misses its own {fmt_bytes(c['at'])} point by {c['worst']:.2g}x)"


def plot_model_vs_measured(summary: dict, alpha: float, beta: float, ax=None,
                           algorithms=("ring", "reduce_bcast", "recursive_doubling")):
    """Log-log time vs size: measured points and α-β model lines for each algorithm."""
    import matplotlib.pyplot as plt
    import numpy as np
    from dltutor.allreduce.cost import model_time, times_of
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.3))
    n = summary["world_size"]
    d_all = sorted({r["bytes"] for r in summary["results"]})
    grid = np.logspace(np.log10(d_all[0]), np.log10(d_all[-1]), 60)
    for alg in algorithms:
        d, t = times_of(summary, alg)
        if len(d):
            ax.plot(d, t * 1e6, "o", color=COLOURS.get(alg), label=f"{alg} measured (fastest pass)")
        ax.plot(grid, model_time(alg, n, grid, alpha, beta) * 1e6, "-", color=COLOURS.get(alg),
                alpha=0.7, label=f"{alg} model")
    ax.set_title(f"α-β model (lines) vs the fastest pass (dots, what the fit uses), N={n} ({_note(summary)})\n"
                 f"α = {alpha * 1e6:.1f} µs, 1/β = {1 / beta / 1e9 if beta else float('inf'):.2f} GB/s"
                 f"{fit_note(summary, alpha, beta)}", fontsize=10)
    _style(ax, "time per all-reduce (µs)")
    return ax


def plot_hierarchical(summary: dict, ax=None):
    """Time vs size for the 2-D all-reduce and the flat ones (dots: the fastest pass, the statistic
    the model lines are fitted to; bars up to the slowest pass) and the α-β model of the flat ring and the 2-D scheme (lines), with α, β
    fitted to this launch's flat ring and all links alike (one machine)."""
    import matplotlib.pyplot as plt
    import numpy as np
    from dltutor.allreduce.cost import fit_summary, flat_ring_time, hierarchical_time
    if ax is None:
        _, ax = plt.subplots(figsize=(9.5, 4.3))
    m, l = summary["nodes"], summary["per_node"]
    link = fit_summary(summary, "ring", "minimax")
    d_all = sorted({r["bytes"] for r in summary["results"]})
    grid = np.logspace(np.log10(d_all[0]), np.log10(d_all[-1]), 60)
    colours = {"hierarchical": "#ff7f0e", "ring": COLOURS["ring"], "gloo": COLOURS["gloo"]}
    for alg, colour in colours.items():
        rows = sorted((r for r in summary["results"] if r["algorithm"] == alg), key=lambda r: r["bytes"])
        t = np.array([r["time_s"] for r in rows]) * 1e6
        up = np.array([max(r.get("times_s") or [r["time_s"]]) for r in rows]) * 1e6 - t
        ax.errorbar([r["bytes"] for r in rows], t, yerr=[np.zeros_like(t), up], fmt="o",
                    color=colour, capsize=3, label=f"{alg}: fastest pass (bar: up to the slowest)")
    ax.plot(grid, flat_ring_time(m, l, grid, link, link) * 1e6, "-", color=colours["ring"], alpha=0.7,
            label="flat ring model")
    ax.plot(grid, hierarchical_time(m, l, grid, link, link) * 1e6, "-", color=colours["hierarchical"],
            alpha=0.7, label="2-D model")
    ax.set_title(f"2-D all-reduce on {m} x {l} ranks vs flat, fastest pass (dots) and modelled (lines), "
                 f"{_note(summary)}\nα = {link[0] * 1e6:.1f} µs, 1/β = "
                 f"{1 / link[1] / 1e9 if link[1] else float('inf'):.2f} GB/s (fitted to the flat ring)"
                 f"{fit_note(summary, *link)}", fontsize=10)
    _style(ax, "time per all-reduce (µs)")
    return ax
