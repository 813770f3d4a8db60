"""What notebook 07's step timelines showed (section 6 and the exercise), in sentences built from
their numbers: wait per step and compute per step (ms) beside the wait share, each with its 95 %
interval over the steady-state steps (`dltutor.io.starve`); shares and their ± in percentage
points (pp).

* `starving(timelines)`: each pipeline's wait share for the light and the heavy model;
* `pipelines(timelines)`: per model, each pipeline against the first;
* `exercise(timelines)`: per run, the time a batch took to arrive beside the step's compute.
"""
from __future__ import annotations

import math
import os

from dltutor.core.findings import INCONCLUSIVE, compare, differs, fmt
from dltutor.io.starve import (STARVED, _steady, compute_ms, compute_ms_spread, share_spread, summary, wait_ms,
                               wait_ms_spread, wait_share)

INSIDE, NO_INTERVAL = "inside the spreads", "no interval: too few steps"
INCONCLUSIVE_LINE = "within the spread of the 50 % line (inconclusive here)"


def _starved(rows) -> str:
    share, spread = wait_share(rows), share_spread(rows)
    if not differs(share, STARVED, spread):
        return "on the line"
    return "starved" if share > STARVED else "fed"


def starving(timelines: dict) -> list[str]:
    """Sentences on `bench.timelines` over models x pipelines: each pipeline's wait share per model
    (compared with the spreads), and which runs waited for data more than half of each step."""
    runs = timelines
    models = list(dict.fromkeys(n.split(" + ")[0] for n in runs))
    pipes = list(dict.fromkeys(n.split(" + ")[1] for n in runs))
    out = []
    if len(models) >= 2:
        a, b = models[:2]
        for p in pipes:
            out += _wait_both_ways(p, a, runs[f"{a} + {p}"], b, runs[f"{b} + {p}"])
    state = {n: _starved(rows) for n, rows in runs.items()}
    for m in models:
        mine = [p for p in pipes if state[f"{m} + {p}"] == "starved"]
        line = [p for p in pipes if state[f"{m} + {p}"] == "on the line"]
        out.append(f"{m} model: starved (wait > {STARVED:.0%} of the step) on {len(mine)} of {len(pipes)} pipelines"
                   + (f" ({', '.join(mine)})" if mine else "")
                   + (f"; {INCONCLUSIVE_LINE} for {', '.join(line)}" if line else "") + ".")
    split = [p for p in pipes if len({state[f"{m} + {p}"] for m in models} - {"on the line"}) > 1]
    out.append("The same pipeline starved one model and fed another: " + ", ".join(split) + "." if split else
               "No pipeline here clearly starved one model and fed another.")
    return out


def _ratio(a: float, b: float, sa: float, sb: float) -> str:
    if math.isnan(sa) or math.isnan(sb):
        return NO_INTERVAL
    return f"{a / b:.3g}x" if b and differs(a, b, sa, sb) else INSIDE


def _parts(rows) -> dict:
    """A run's wait per step (ms), compute per step (ms) and wait share (%), each with its spread."""
    return {"wait": (wait_ms(rows), wait_ms_spread(rows)),
            "compute": (compute_ms(rows), compute_ms_spread(rows)),
            "share": (100 * wait_share(rows), 100 * share_spread(rows))}


def _workers(pipe: str) -> int:
    return int(pipe.split("/w")[1]) if "/w" in pipe else 0


def _load(rows) -> str:
    loads = [r["load_1m"] for r in rows if not math.isnan(r.get("load_1m", math.nan))]
    return f"{min(loads):.1f}-{max(loads):.1f}" if loads else "n/a"


def _two_runs(head: str, ra, rb, same_model: bool = False, pipes=("", "")) -> str:
    """Run a against run b in absolute wait, compute and share (a/b, or inside the spreads), and
    what the share hides: a share can move only because the compute moved. `same_model`: the two
    runs trained the same model, whose compute should not differ; `pipes`: their pipeline names."""
    pa, pb = _parts(ra), _parts(rb)
    said = {k: _ratio(pa[k][0], pb[k][0], pa[k][1], pb[k][1]) for k in pa}
    line = (f"{head}: wait per step {fmt(pa['wait'][0], 'ms')} vs {fmt(pb['wait'][0], 'ms')} ({said['wait']}), "
            f"compute {fmt(pa['compute'][0], 'ms')} vs {fmt(pb['compute'][0], 'ms')} ({said['compute']}), "
            f"wait share {pa['share'][0]:.3g}% vs {pb['share'][0]:.3g}% ({said['share']})")
    sign = lambda k: 0 if said[k] in (INSIDE, NO_INTERVAL) else (1 if pa[k][0] > pb[k][0] else -1)  # noqa: E731
    notes = []
    if sign("share") and sign("wait") != sign("share"):
        moved = {1: "rose", -1: "fell"}
        wait = "did not move beyond its spread" if not sign("wait") else moved[sign("wait")]
        compute = (f"the compute was {said['compute']} as long" if sign("compute") else
                   "the compute did not move beyond its spread either (the share's interval is the "
                   "narrower one)")
        notes.append(f"the share {moved[sign('share')]} although the wait per step {wait}; {compute}, "
                     "so the share alone misreads the pipeline")
    workers = [_workers(p) for p in pipes]
    if same_model and sign("wait") == 1 and workers[0] > workers[1]:
        notes.append(f"{workers[0]} loader worker process(es) and the training process shared "
                     f"{os.cpu_count()} cores here (1-minute load average {_load(ra)} during the run): "
                     "with no idle core, a worker's decoding takes the cores the others need, so the "
                     "workers made each batch arrive later, not earlier")
    if same_model and sign("compute"):
        cause = ("loader workers decoding on the same cores, other work on the machine, or noise"
                 if any(workers) else "neither run had loader workers, so other work on the shared "
                 f"machine (1-minute load average {_load(ra)} vs {_load(rb)}) or noise")
        notes.append(f"the same model computed {said['compute']} as long per step here: the model "
                     f"did not change, so something else did ({cause}), and that moves the share too")
    return line + (": " + "; ".join(notes) if notes else "") + "."


def _wait_both_ways(pipe: str, a: str, ra, b: str, rb) -> list[str]:
    """One pipeline feeding two models, in absolute wait and compute as well as in shares."""
    return [f"{pipe}: wait share (pp: percentage points) "
            + compare(a, 100 * wait_share(ra), b, 100 * wait_share(rb), unit="%",
                      spread_a=100 * share_spread(ra), spread_b=100 * share_spread(rb)),
            _two_runs(f"{pipe}, {a} vs {b}", ra, rb)]


def pipelines(timelines: dict) -> list[str]:
    """Per model, each pipeline against the first one: wait per step, compute and share. The same
    model's compute should not depend on its pipeline; when it does (workers taking cores, a busy
    machine), the share moves without the pipeline changing."""
    models = list(dict.fromkeys(n.split(" + ")[0] for n in timelines))
    pipes = list(dict.fromkeys(n.split(" + ")[1] for n in timelines))
    return [_two_runs(f"{m}, {p} vs {pipes[0]}", timelines[f"{m} + {p}"], timelines[f"{m} + {pipes[0]}"],
                      same_model=True, pipes=(p, pipes[0]))
            for m in models for p in pipes[1:] if f"{m} + {p}" in timelines]


def exercise(timelines: dict) -> list[str]:
    """Per run: how long a batch took to arrive on average beside the step's compute, and the verdict."""
    out = []
    for row, (name, rows) in zip(summary(timelines), timelines.items()):
        verdict = _starved(rows)
        out.append(f"{name}: on average a batch arrived after {fmt(row['wait_ms'], 'ms')} of waiting, "
                   f"the step computed {fmt(row['compute_ms'], 'ms')} (means over {len(_steady(rows, True))} steps); "
                   f"wait share {row['wait_share']:.0%} ± {fmt(100 * row['share_spread'])} pp -> "
                   + (INCONCLUSIVE_LINE if verdict == "on the line" else verdict) + ".")
    starved = sorted(n for n, rows in timelines.items() if _starved(rows) == "starved")
    out.append("Starved in this run: " + (", ".join(starved) if starved else "none") + ".")
    return out


__all__ = ["INCONCLUSIVE", "INCONCLUSIVE_LINE", "exercise", "pipelines", "starving"]
