"""Horovod pictures: the timeline (HOROVOD_TIMELINE) as phases, fusion sweeps, engine and scaling bars.

A Horovod timeline is a Chrome-trace JSON file written by rank 0: one trace "process" per tensor
(named by a metadata event), and on it begin/end events of the phases of each collective
(zero-length "X" events inside a negotiation are the ticks of each rank saying "ready"):
  NEGOTIATE_ALLREDUCE   rank 0 waits until every worker has said "this gradient is ready"
  ALLREDUCE             the operation itself, with nested activities such as QUEUE,
                        MEMCPY_IN_FUSION_BUFFER, the transport's all-reduce (e.g. GLOO_ALLREDUCE)
                        and MEMCPY_OUT_FUSION_BUFFER.
Horovod keeps appending while it runs and may never write the closing bracket, so
`read_timeline` accepts a truncated file.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from dltutor.core.units import MiB


@dataclass
class Span:
    tensor: str
    name: str        # phase or activity name, e.g. NEGOTIATE_ALLREDUCE, ALLREDUCE, QUEUE
    start_us: float
    end_us: float
    depth: int       # 0 = top level (negotiation / operation), 1+ = nested activity

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


def read_events(path) -> list[dict]:
    """The trace events of a (possibly unterminated) Horovod timeline file."""
    text = Path(path).read_text()
    body = text.strip().rstrip(",")
    if body.startswith("[") and not body.endswith("]"):
        body += "]"
    try:
        events = json.loads(body)
        return events["traceEvents"] if isinstance(events, dict) else list(events)
    except ValueError:
        pass
    events = []  # fall back to one object per line; skip a half-written last line
    for line in text.splitlines():
        line = line.strip().rstrip(",")
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def read_timeline(path) -> list[Span]:
    """Spans (tensor, phase, start, end, depth) from a Horovod timeline file, sorted by start."""
    events = read_events(path)
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e.get("pid")] = (e.get("args") or {}).get("name", str(e.get("pid")))
    stacks, spans = defaultdict(list), []
    for e in events:
        ph, pid = e.get("ph"), e.get("pid")
        tensor = names.get(pid, str(pid))
        if ph == "B":
            stacks[(pid, e.get("tid"))].append(e)
        elif ph == "E":
            stack = stacks[(pid, e.get("tid"))]
            if stack:
                begin = stack.pop()
                spans.append(Span(tensor, begin.get("name", "?"), float(begin["ts"]),
                                  float(e["ts"]), len(stack)))
        elif ph == "X" and float(e.get("dur", 0)) > 0:  # zero-length X: a rank-ready tick
            spans.append(Span(tensor, e.get("name", "?"), float(e["ts"]),
                              float(e["ts"]) + float(e["dur"]),
                              len(stacks[(pid, e.get("tid"))])))
    return sorted(spans, key=lambda s: (s.start_us, s.depth))


def phase_of(span: Span) -> str:
    """'negotiation', 'all-reduce' (the whole operation; 'broadcast' etc. for other ops) or the
    nested activity's name in lower case (queue, memcpy_in_fusion_buffer, gloo_allreduce, ...)."""
    if span.name.startswith("NEGOTIATE"):
        return "negotiation"
    if span.depth == 0:
        return "all-reduce" if span.name == "ALLREDUCE" else span.name.lower()
    return span.name.lower()


def phase_totals(spans: list[Span]) -> dict:
    """Total milliseconds per phase, summed over tensors. The tensors' spans overlap in time, so a
    sum can exceed the run's length: it is not a share of the wall-clock time (`phase_wall` is)."""
    totals = defaultdict(float)
    for s in spans:
        totals[phase_of(s)] += s.duration_us / 1000.0
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def _union_us(intervals) -> float:
    """Length of the union of (start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + (b - a), b
        elif b > end:
            total, end = total + (b - end), b
    return total


def phase_wall(spans: list[Span]) -> dict:
    """Wall-clock milliseconds during which at least one tensor was in each top-level phase
    (negotiation, all-reduce: the union of the tensors' spans), and `traced`, first start to last end."""
    by = defaultdict(list)
    for s in spans:
        if s.depth == 0:
            by[phase_of(s)].append((s.start_us, s.end_us))
    out = {k: _union_us(v) / 1000.0 for k, v in by.items()}
    out["traced"] = (max(s.end_us for s in spans) - min(s.start_us for s in spans)) / 1000.0 if spans else 0.0
    return out


def _short(name: str, width: int = 28) -> str:
    name = re.sub(r"^(allreduce|broadcast)\.", "", name)
    return name if len(name) <= width else "..." + name[-(width - 3):]


def plot_timeline(spans: list[Span], title: str = "Horovod timeline", max_tensors: int = 24,
                  window_ms: float | None = None, ax=None):
    """Gantt chart: one row per tensor (the last `max_tensors` to start), negotiation and
    all-reduce phases as coloured bars, nested activities as thin bars inside them."""
    import matplotlib.pyplot as plt
    if not spans:
        raise ValueError("the timeline has no complete phases (was HOROVOD_TIMELINE set, "
                         "and did the run finish?)")
    t0, every = min(s.start_us for s in spans), len({s.tensor for s in spans})
    if window_ms is not None:  # the last window_ms of the run: the steady-state steps
        t_end = max(s.end_us for s in spans)
        spans = [s for s in spans if s.end_us >= t_end - window_ms * 1000]
        t0 = min(s.start_us for s in spans)
    order = list(dict.fromkeys(s.tensor for s in spans))[-max_tensors:]
    title += (f"\n(the last {len(order)} of the trace's {every} tensors to start; x: ms since the first "
              "span shown, spans that started earlier left out)")
    row = {t: i for i, t in enumerate(order)}
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 0.28 * len(order) + 1.6))
    colours = {"negotiation": "tab:orange", "all-reduce": "tab:blue"}
    palette = iter(["tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
                    "tab:cyan", "tab:gray"])
    seen = set()
    for s in spans:
        if s.tensor not in row:
            continue
        phase = phase_of(s)
        if phase not in colours:
            colours[phase] = next(palette, "black")
        height = 0.8 if s.depth == 0 else 0.35
        ax.barh(row[s.tensor], max(s.duration_us / 1000.0, 1e-3),
                left=(s.start_us - t0) / 1000.0, height=height, color=colours[phase],
                label=None if phase in seen else phase, alpha=0.9 if s.depth else 0.6)
        seen.add(phase)
    ax.set_yticks(range(len(order)), [_short(t) for t in order], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time since first shown event (ms)")
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=4, fontsize=8)
    ax.figure.tight_layout()
    return ax


def plot_phase_totals(totals: dict, title: str = "ms per phase, summed over tensors\n(they overlap: "
                      "not shares of the run)", ax=None):
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    ax.barh(list(totals), list(totals.values()), color="tab:blue")
    ax.invert_yaxis()
    ax.set_xlabel("ms")
    ax.set_title(title)
    ax.figure.tight_layout()
    return ax


def plot_knob(labels, step_times_s, xlabel: str, title: str, ax=None, ddp_step_s=None,
              highlight=None, spreads_s=None):
    """Bars of Horovod's step time for each value of one setting; DDP's step time as a line.

    `highlight` is the label of the value the lab used (drawn darker); `spreads_s` draws each
    run's 95 % CI of its mean step time (over its iterations) as an error bar (none where nan)."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    bars = ax.bar(labels, [1000 * t for t in step_times_s],
                  yerr=None if spreads_s is None else [1000 * e if e == e else 0.0 for e in spreads_s], capsize=6,
                  color=["indigo" if lab == highlight else "tab:purple" for lab in labels])
    for b, t in zip(bars, step_times_s):  # the value inside the bar, clear of the error bar
        ax.annotate(f"{1000 * t:.0f} ms", (b.get_x() + b.get_width() / 2, 500 * t),
                    ha="center", va="center", fontsize=9, color="white")
    if ddp_step_s is not None:
        ax.axhline(1000 * ddp_step_s, color="tab:green", ls="--", lw=1.2,
                   label=f"DDP, same work: {1000 * ddp_step_s:.0f} ms")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("Horovod time per step (ms), mean ± 95 % CI")
    ax.set_title(title, fontsize=10)
    ax.figure.tight_layout()
    return ax


def fusion_label(nbytes: int) -> str:
    return "0 (off)" if nbytes == 0 else f"{nbytes / MiB:g} MiB"


def plot_fusion(thresholds_bytes, step_times_s, title: str, ax=None, ddp_step_s=None,
                highlight_bytes=None, spreads_s=None):
    """Step time against HOROVOD_FUSION_THRESHOLD (0 = fusion off)."""
    return plot_knob([fusion_label(b) for b in thresholds_bytes], step_times_s,
                     "HOROVOD_FUSION_THRESHOLD", title, ax, ddp_step_s,
                     None if highlight_bytes is None else fusion_label(highlight_bytes), spreads_s)


def dark_bar(points, lab_row: dict, key: str) -> str:
    """Which run a sweep panel's dark bar (the lab's value) is: the run above, reused by
    `runs.sweep_setting` when the value is not in its list, the lab-setting launches of
    `rounds.in_rounds`, or a new run with the same settings."""
    run = next((p[3] for p in points if p[0] == float(lab_row[key])), None)
    if run is None:
        return "not in this sweep"
    if run.endswith("(run above)"):
        return f"the {lab_row['workers']}-worker run above"
    return ("the lab-setting launches of the rounds" if " launch" in run
            else "a new run, same settings as the run above")


def plot_setting_sweeps(fusion, cycle, lab_row: dict, ddp_row: dict | None, label: str):
    """Notebook 03: print and plot the two `runs.sweep_setting` results side by side.

    `lab_row` is the Horovod run with the lab's own settings (the lab's values are drawn darker, and
    each panel's title says whether its dark bar is that run or a new one, `dark_bar`; its
    `workers` is the sweep's, named in the title),
    `ddp_row` the DDP run on the same work (its step time is the dashed line)."""
    import matplotlib.pyplot as plt
    for value, t, spread, run in fusion:
        print(f"HOROVOD_FUSION_THRESHOLD {fusion_label(int(value)):>8}: {t:6.3f} +-{spread:.3f} "
              f"s/step (95 % CI)  ({run})")
    for value, t, spread, run in cycle:
        print(f"HOROVOD_CYCLE_TIME       {value:>5g} ms: {t:6.3f} +-{spread:.3f} s/step (95 % CI)  ({run})")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    ddp_step = ddp_row["step_time_s"] if ddp_row else None
    dark = dark_bar(fusion, lab_row, "fusion_threshold_bytes")
    plot_fusion([int(p[0]) for p in fusion], [p[1] for p in fusion],
                f"step time vs fusion threshold\n(dark: the lab's setting, {dark})", ax=axes[0],
                ddp_step_s=ddp_step, highlight_bytes=lab_row["fusion_threshold_bytes"],
                spreads_s=[p[2] for p in fusion])
    plot_knob([f"{p[0]:g} ms" for p in cycle], [p[1] for p in cycle], "HOROVOD_CYCLE_TIME",
              f"step time vs cycle time\n(dark: the lab's setting, {dark_bar(cycle, lab_row, 'cycle_time_ms')})",
              ax=axes[1], ddp_step_s=ddp_step,
              highlight=f"{lab_row['cycle_time_ms']:g} ms", spreads_s=[p[2] for p in cycle])
    fig.suptitle(f"Horovod, {lab_row['workers']} workers, each bar mean ± 95 % CI over its timed "
                 f"iterations -- {label}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_rows(rows: list[dict], key: str, ylabel: str, title: str, ax=None, reference=(), err=None):
    """Bars of `key` for each row (measured) and each reference row (hatched, labelled); `err` names
    the measured rows' 95 % CI key (e.g. "total_img_sec_ci"), drawn as error bars (none where nan)."""
    import matplotlib.pyplot as plt
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.4))
    import textwrap
    labels = [textwrap.fill(r["run"], 18) for r in list(rows) + list(reference)]  # no overprint
    values = [r[key] for r in rows] + [r[key] for r in reference]
    errs = [r.get(err, 0.0) if err else 0.0 for r in rows] + [0.0] * len(reference)
    bars = ax.bar(range(len(values)), values, yerr=[e if e == e else 0.0 for e in errs], capsize=4,
                  color=["tab:blue" if r.get("engine") == "horovod" else "tab:green"
                         for r in rows] + ["lightgray"] * len(reference))
    for b in bars[len(rows):]:
        b.set_hatch("//")
    for b, v in zip(bars, values):
        ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(range(len(values)), labels, fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.figure.tight_layout()
    return ax
