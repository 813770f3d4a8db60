"""What notebook 08's straggler runs show, said no more precisely than one run each can say it.

The straggler run and the healthy run are one launch each, at different moments of a machine
others may share; the steps of one run drift (they are not independent samples), so the
sentences give medians and ranges over the steps, round ratios to one significant figure, and
call no difference between the two runs decided.
"""
from __future__ import annotations

import os

from dltutor.core.findings import fmt
from dltutor.debug import diagnose


def about(ratio: float) -> str:
    """A ratio rounded to one significant figure ("about 200x"): one run each supports no more."""
    return f"about {float(f'{ratio:.1g}'):g}x"


def load_words(load) -> str:
    """The machine's load average (1, 5, 15 min) and its core count, or that none was recorded."""
    if not load:
        return "load average not recorded"
    return (f"load average {', '.join(f'{x:.1f}' for x in load)} over 1, 5 and 15 min on "
            f"{os.cpu_count()} cores: the CPUs were shared" if max(load) > (os.cpu_count() or 1)
            else f"load average {', '.join(f'{x:.1f}' for x in load)} over 1, 5 and 15 min on "
                 f"{os.cpu_count()} cores")


def spread(row: dict, key: str) -> str:
    return (f"{fmt(row[key + '_med'], 'ms')} (steps {fmt(row[key + '_lo'])}–"
            f"{fmt(row[key + '_hi'])})")


def table(slow_rows, healthy_rows) -> list[dict]:
    """The table's rows: per run and rank, median and range (lowest–highest) of its steps."""
    keys = ("step", "compute", "backward")
    return [{"run": run, "rank": r["rank"], "steps": r["steps"],
             **{f"{k}_ms (median)": round(r[f"{k}_med"], 2) for k in keys},
             **{f"{k} range": f"{r[f'{k}_lo']:.1f}–{r[f'{k}_hi']:.1f}" for k in keys}}
            for run, rows in (("straggler", slow_rows), ("healthy", healthy_rows)) for r in rows]


def findings(out, fixed=None, load=None) -> list[str]:
    """The slow rank, what it costs the others, and how far one run each can say it."""
    d = diagnose.straggler(out.steps())
    rows = {r["rank"]: r for r in d["rows"]}
    s = rows[d["slow_rank"]]
    slept = [m.get("slow_ms") for m in out.of("fault") if m.get("slow_ms")]
    lines = [f"One run each, at different moments ({load_words(load)}); per rank the median of "
             f"its {s['steps']} steps after step 0 (warm-up) and their range. The steps of one run "
             "drift, so they are no independent samples: no interval is given and no difference "
             "between the two runs is called decided."]
    if slept:
        lines.append(f"The stand-in: rank {out.fault_rank} sleeps {slept[0]:g} ms per step "
                     "(time.sleep, standing in for a busy core; a sleep frees the core, a busy "
                     f"core would not). Its compute: {spread(s, 'compute')}, "
                     f"{fmt(s['compute_med'] - slept[0], 'ms')} above the sleep (oversleeping "
                     "and the forward, on a loaded machine).")
    others = [r for k, r in rows.items() if k != d["slow_rank"]]
    if fixed is None:
        return lines + [f"rank {r['rank']} computed {spread(r, 'compute')}." for r in others]
    base = {r["rank"]: r for r in diagnose.straggler(fixed.steps())["rows"]}
    for r in (r for r in others if r["rank"] in base):
        b = base[r["rank"]]
        lines.append(f"rank {r['rank']}'s backward (it holds the wait for the slow rank in "
                     f"DDP's all-reduce): {spread(r, 'backward')} with the straggler, "
                     f"{spread(b, 'backward')} in the healthy run, "
                     f"{about(r['backward_med'] / b['backward_med'])}. The slow rank's own "
                     f"backward: {spread(s, 'backward')}.")
        lines.append(compute_words(r, b))
    for k, r in sorted(rows.items()):
        if k in base:
            b = base[k]
            apart = ("every step of the straggler run took longer than every step of the "
                     "healthy run" if r["step_lo"] > b["step_hi"] else
                     "the two runs' step ranges overlap")
            lines.append(f"rank {k}'s step: {spread(r, 'step')} with the straggler, "
                         f"{spread(b, 'step')} healthy ({about(r['step_med'] / b['step_med'])}; "
                         f"{apart}); the median grew by "
                         f"{fmt(r['step_med'] - b['step_med'], 'ms')}"
                         + (f" for a {slept[0]:g} ms sleep." if slept else "."))
    return lines


def compute_words(r: dict, b: dict) -> str:
    """The other rank's compute, with and without the straggler, and why one run each cannot
    say where a change came from (its 'compute' includes DDP's buffer broadcast, a collective)."""
    moved = r["compute_med"] > b["compute_hi"] or r["compute_med"] < b["compute_lo"]
    what = (f"rose from {fmt(b['compute_med'], 'ms')} to {fmt(r['compute_med'], 'ms')} (medians)"
            f", which a sleeping straggler does not cause (the sleep frees the core)"
            if r["compute_med"] > b["compute_hi"] else
            f"went from {fmt(b['compute_med'], 'ms')} to {fmt(r['compute_med'], 'ms')} (medians)")
    return (f"rank {r['rank']}'s compute {what if moved else 'stayed within the healthy range: ' + what}"
            f"; its compute includes DDP's forward broadcast of the BatchNorm buffers (a collective"
            f"), so it is not local work only; this run cannot separate a change from other load "
            f"on the machine (one run each; with the straggler its steps ranged "
            f"{fmt(r['compute_lo'])}–{fmt(r['compute_hi'], 'ms')}).")


def takeaway(slow_out, healthy) -> list[str]:
    """The closing line: each other rank's step with and without the straggler, medians."""
    s = diagnose.straggler(slow_out.steps())
    base = {r["rank"]: r for r in diagnose.straggler(healthy.steps())["rows"]}
    return [f"The straggler (rank {s['slow_rank']}): rank {r['rank']}'s step {spread(r, 'step')} "
            f"with it, {spread(base[r['rank']], 'step')} without it "
            f"({about(r['step_med'] / base[r['rank']]['step_med'])}; one run each)."
            for r in s["rows"] if r["rank"] != s["slow_rank"] and r["rank"] in base]
