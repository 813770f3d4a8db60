"""How often to save: Young's and Daly's intervals, and measured goodput under seeded random kills.

    study = goodput.measure(multiples=(0.25, 1, 4), mtbf_s=None, seed=0, fast=True)
    goodput.table(study); goodput.findings(study); goodput.plot(study, ax=None)

Saving costs C seconds each time; a failure costs the restart R (kill -> training again) plus
the work since the last save. With failures at a mean time M apart (exponential: a Poisson
process), saving every tau seconds of work wastes, to first order, C/tau + (tau/2 + R)/M of
the time, least at
    Young (J. W. Young, "A first order approximation to the optimum checkpoint interval",
    CACM 17(9), 1974):   tau_Y = sqrt(2 C M)
    Daly (J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
    dumps", FGCS 22(3), 2006):   tau_D = sqrt(2 C M) (1 + sqrt(C/2M)/3 + (C/2M)/9) - C  (C < 2M,
    else M), from his exact expected wall time for exponential failures,
    T_wall = M e^(R/M) (e^((tau+C)/M) - 1) per tau of work; its inverse is `expected_goodput`.

Measured (`measure`): lab 10 on 2 ranks under launch(max_restarts=...), the course's restarts
(dltutor.launch.restart). A short run with a kill gives C and R to choose the intervals (median
blocking seconds of its saves; its kill_to_training_s); an uninterrupted run without saves gives
the reference parameters and the step time. M is ASSUMED, scaled to the demo (seconds, not
hours). Then one run per interval (multiples of Young's, in steps) with --fail-mtbf M: each
attempt draws its time to failure from an exponential seeded by (seed, attempt), counted from the
start of its training loop (failures while training or saving, as in Young's model; none during a
restart, which Daly's exact model also counts), so every interval meets the same failure times
(common random numbers: a fairer comparison). The models are drawn with C and R measured over all
these runs (every save of their last attempts, every restart).
Goodput of a run = useful work / time spent: useful = its steps x the uninterrupted run's mean step
time (saves excluded; every run does the same steps, so the same useful work), spent = the whole
launch's wall time - the start-up of its last attempt (launched -> training loop), the part every
launch pays once. The intervals are multiples of Young's from the calibration run's C, in steps at
the uninterrupted step time; an interval as long as the run leaves no save in it (said so). The uninterrupted run, measured the same way, is the
ceiling (no failure, no save). Each run must end with its parameters bit for bit (resumes load
complete checkpoints).
"""
from __future__ import annotations

import math
import statistics
import tempfile
from pathlib import Path

from dltutor.checkpoint import restarts
from dltutor.core.course import lab
from dltutor.core.tables import Table

LLAMA3 = ("the Llama 3 paper (Llama Team, AI @ Meta, 2024) reports 419 unexpected interruptions "
          "in 54 days of its 405B pre-training")
LLAMA3_MTBF_S = 54 * 24 * 3600 / 419          # that paper's figures: about one every 3.1 h
FAST = dict(steps=1000, mtbf_s=3.0, timeout=120.0)    # about 25 s on 2 CPU cores
FULL = dict(steps=8000, mtbf_s=5.0, timeout=600.0)    # about 2 min: more kills per interval
MAX_RESTARTS = 200


def young_interval(save_s: float, mtbf_s: float) -> float:
    """Young's (1974) first-order optimum: sqrt(2 C M) seconds of work between saves."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    """Daly's (2006) higher-order optimum; M itself when C >= 2M."""
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_s


def first_order_goodput(interval_s, save_s, restart_s, mtbf_s) -> float:
    """1 - C/tau - (tau/2 + R)/M (at least 0): the model Young's interval optimises."""
    return max(0.0, 1.0 - save_s / interval_s - (interval_s / 2.0 + restart_s) / mtbf_s)


def expected_goodput(interval_s, save_s, restart_s, mtbf_s) -> float:
    """tau / T_wall with Daly's exact expected wall time for exponential failures."""
    m = mtbf_s
    return interval_s / (m * math.exp(restart_s / m) * math.expm1((interval_s + save_s) / m))


def _run(args, log_dir: Path, nproc: int, timeout: float, max_restarts: int = 0):
    from dltutor.launch.run import launch
    return launch(lab("10_checkpoint/train.py"), nproc=nproc, args=[str(a) for a in args],
                  log_dir=log_dir, echo=False, timeout=timeout, max_restarts=max_restarts)


def step_time(m: dict) -> float:
    """A rank's mean step in its last attempt, saves excluded: (loop - saves) / its steps."""
    return (m["loop_s"] - sum(s[1] for s in m["saves"])) / max(1, len(m["losses"]))


def accounting(res, steps: int, every: int, step_s: float | None = None) -> dict:
    """One run's goodput: useful = its `steps` x `step_s` (the uninterrupted run's step time: every
    run does the same work; default: this run's own, for the uninterrupted run itself), spent =
    its wall time - the start-up of its last attempt. `saves` counts the saves inside the run."""
    own = max(map(step_time, res.metrics))
    step_s = step_s or own
    startup_s = max(res.metric("startup_s"))
    useful, spent = steps * step_s, res.wall_time - startup_s
    return {"interval_s": every * step_s, "step_s": own, "useful_s": useful, "spent_s": spent,
            "wall_s": res.wall_time, "goodput": useful / spent,
            "saves": (steps - 1) // every if every else 0}


def measure(multiples=(0.25, 1.0, 4.0), mtbf_s: float | None = None, seed: int = 0,
            fast: bool = True, nproc: int = 2, root=None) -> dict:
    """Calibrate C, R and the uninterrupted run, then one seeded-kill run per multiple of Young's
    interval. Returns {"rows": one dict per interval, "save_s", "restart_s", "mtbf_s",
    "young_s", "daly_s", "step_s", "ceiling" (the uninterrupted run's goodput), "fast", "label", ...}."""
    mode = FAST if fast else FULL
    mtbf_s = float(mtbf_s or mode["mtbf_s"])
    root = Path(root or tempfile.mkdtemp(prefix="goodput-"))
    base = ["--tiny", "--steps", mode["steps"], "--seed", seed]
    cal = _run(["--tiny", "--steps", 100, "--seed", seed, "--save-every", 10, "--kill-at", 35,
                "--ckpt-dir", root / "cal"],
               root / "cal-logs", nproc, mode["timeout"], max_restarts=1)
    ref = _run([*base, "--save-every", 0, "--ckpt-dir", root / "ref"], root / "ref-logs", nproc,
               mode["timeout"], max_restarts=1)   # restarts on: its start-up is timed; none happens
    if ref.restart_count:
        raise RuntimeError(f"the uninterrupted run failed and was restarted: {ref.restarts}")
    step_s, digest = max(map(step_time, ref.metrics)), ref.metrics[0]["param_digest"]
    cal_save_s = statistics.median(s[1] for m in cal.metrics for s in m["saves"])
    cal_restart_s = max(cal.metric("kill_to_training_s"))
    rows, saves, backs = [], [], []
    for k in multiples:
        every = max(1, round(k * young_interval(cal_save_s, mtbf_s) / step_s))
        name = f"every-{every}"
        res = _run([*base, "--save-every", every, "--fail-mtbf", mtbf_s, "--fail-seed", seed,
                    "--ckpt-dir", root / name], root / f"{name}-logs", nproc, mode["timeout"],
                   max_restarts=MAX_RESTARTS)
        back = restarts.read_restarts(root / name)
        backs += [b["kill_to_training_s"] for b in back]
        saves += [s[1] for m in res.metrics for s in m["saves"]]
        rows.append({**accounting(res, mode["steps"], every, step_s), "x_young": k, "every_steps": every,
                     "kills": res.restart_count, "killed_ranks": [r.ranks for r in res.restarts],
                     "steps_redone": sum(b["steps_redone"] for b in back),
                     "bit_for_bit": res.metrics[0]["param_digest"] == digest, "log_dir": str(res.log_dir)})
    save_s = statistics.median(saves)
    restart_s = statistics.mean(backs) if backs else cal_restart_s
    for r in rows:
        r["first_order"] = first_order_goodput(r["interval_s"], save_s, restart_s, mtbf_s)
        r["expected"] = expected_goodput(r["interval_s"], save_s, restart_s, mtbf_s)
    young_s, daly_s = young_interval(save_s, mtbf_s), daly_interval(save_s, mtbf_s)
    for r in rows:   # the work done twice, at the uninterrupted step time: within what was spent
        r["redone_s"] = r["steps_redone"] * step_s
    m0 = ref.metrics[0]
    return {"rows": rows, "save_s": save_s, "saves_timed": len(saves), "restarts_timed": len(backs),
            "calibration": {"save_s": cal_save_s, "restart_s": cal_restart_s,
                            "young_s": young_interval(cal_save_s, mtbf_s)},
            "restart_s": restart_s, "mtbf_s": mtbf_s, "young_s": young_s, "daly_s": daly_s,
            "step_s": step_s, "ceiling": accounting(ref, mode["steps"], 0)["goodput"], "steps": mode["steps"],
            "nproc": nproc, "seed": seed, "fast": fast, "root": str(root),
            "label": f"{m0['hardware']}, {nproc} ranks" + (", fast mode" if fast else "")}


def table(study: dict) -> Table:
    """One row per interval: kills, goodput measured and modelled, bit for bit."""
    cols = ["x_young", "every_steps", "interval_s", "saves", "kills", "steps_redone", "useful_s", "spent_s",
            "goodput", "first_order", "expected", "bit_for_bit"]
    return Table(study["rows"], cols, digits={"interval_s": 3, "useful_s": 1, "spent_s": 1,
                                              "goodput": 3, "first_order": 3, "expected": 3},
                 headers={"x_young": "× Young (calibration's)", "every_steps": "save every (steps)",
                          "saves": "saves on the schedule", "steps_redone": "steps redone",
                          "bit_for_bit": "bit for bit",
                          "interval_s": "interval (s)", "first_order": "model (1st order)",
                          "expected": "model (Daly exact)", "useful_s": "useful (s)",
                          "spent_s": "spent (s)"},
                 note=f"{study['label']}; M = {study['mtbf_s']:g} s ASSUMED; goodput = useful / "
                      "spent: steps x the uninterrupted run's step time / (the launch's wall time minus the last "
                      "attempt's start-up, launch -> training loop)")


def _kill_points(row: dict, s: dict) -> float:
    """Goodput points one kill more would cost this run: R + half the work between saves (half the
    run when no save fell inside it) added to its spent."""
    cost = s["restart_s"] + min(row["interval_s"], row["useful_s"]) / 2
    return 100 * (row["goodput"] - row["useful_s"] / (row["spent_s"] + cost))


def _best(rows: list, s: dict) -> str:
    """Which interval did best here, and whether the gap to the next is beyond one kill's worth."""
    ranked = sorted(rows, key=lambda r: r["goodput"], reverse=True)
    best, second = ranked[0], ranked[1]
    gap, worth = 100 * (best["goodput"] - second["goodput"]), max(_kill_points(r, s) for r in (best, second))
    head = (f"Highest goodput in this run: saving every {best['every_steps']} steps "
            f"({best['x_young']:g}x Young's), {best['goodput']:.1%}, {gap:.1f} points above the next "
            f"({second['x_young']:g}x, {second['goodput']:.1%})")
    if gap < worth:
        return head + (f"; one kill more or less is worth about {worth:.0f} points here, so which "
                       "interval is best is inconclusive in this run.")
    return head + f", more than one kill's worth (about {worth:.0f} points)."


def findings(study: dict) -> list[str]:
    """Sentences printed from the study's numbers."""
    s, rows = study, study["rows"]
    cal = s["calibration"]
    out = [f"Measured on {s['label']}: a save blocks the loop C = {s['save_s']:.3f} s (median of "
           f"{s['saves_timed']} saves: both ranks', in each run's last attempt), a restart costs R = {s['restart_s']:.2f} s from the kill to "
           + (f"training again (mean of the runs' {s['restarts_timed']}; the calibration's: "
              f"{cal['restart_s']:.2f} s)" if s["restarts_timed"] else
              "training again (the calibration's: no run below resumed after a kill)")
           + f"; M = {s['mtbf_s']:g} s is ASSUMED (scaled to this demo), not measured. These restarts are "
           "the course's launch, whose ranks fork from a warm server with torch already imported; a "
           "cold start (torchrun, section 6) took longer, and a real job's restart also pays the "
           "scheduler, NCCL's set-up and data loading.",
           f"The intervals tried are multiples of Young's interval from the calibration run "
           f"(C = {cal['save_s']:.3f} s): {cal['young_s']:.3f} s of work, at the uninterrupted step of "
           f"{1000 * s['step_s']:.2f} ms. With C over all the runs' saves, Young's sqrt(2CM) = "
           f"{s['young_s']:.3f} s (the dotted line in the plot) and Daly's = {s['daly_s']:.3f} s. The "
           f"uninterrupted run (no failure, no save) measured the same way has goodput {s['ceiling']:.1%}: "
           "the ceiling of this accounting.", _best(rows, s)]
    out.append("Measured minus Daly's exact model: " + ", ".join(
        f"{100 * (r['goodput'] - r['expected']):+.0f} points at {r['x_young']:g}x" for r in rows)
        + " (Daly's model lets failures strike during restarts too, which these runs' kills do not, and "
          "it is an average over many failures: each run below had a handful).")
    kills = ", ".join(f"{r['kills']} at {r['x_young']:g}x ({r['spent_s'] / s['mtbf_s']:.1f})" for r in rows)
    out.append(f"Few failures make this noisy: kills per run (and the number its time spent would "
               f"expect at M = {s['mtbf_s']:g} s): {kills}; the failure clock stops during restarts, and "
               "every run draws the same seeded times, so they sit together above or below that.")
    none = [r for r in rows if r.get("saves") == 0]
    if none:
        out.append("No save fell inside the run at " + ", ".join(f"{r['x_young']:g}x" for r in none)
                   + f" (an interval of {none[0]['every_steps']} steps or more in a run of "
                     f"{s['steps']} steps): every restart there began again at step 0.")
    exact = [r for r in rows if r["bit_for_bit"]]
    out.append(f"{len(exact)} of {len(rows)} runs ended with the uninterrupted run's parameters "
               f"bit for bit (same sha256)" + ("." if len(exact) == len(rows) else
               ": NOT " + ", ".join(f"every {r['every_steps']}" for r in rows if not r["bit_for_bit"])))
    out.append(f"For scale, {LLAMA3} (one every {LLAMA3_MTBF_S / 3600:.1f} h, that paper's "
               "figure); Young's interval grows with sqrt(C M), and a model of that size takes minutes, "
               "not this demo's milliseconds, to save.")
    return out


def plot(study: dict, ax=None):
    """Measured goodput per interval (each point: its kills) beside the two model curves."""
    import matplotlib.pyplot as plt
    import numpy as np
    ax = ax or plt.subplots(figsize=(7, 4))[1]
    s, rows = study, study["rows"]
    lo, hi = min(r["interval_s"] for r in rows) / 2, max(r["interval_s"] for r in rows) * 2
    taus = np.geomspace(lo, hi, 200)
    args = (s["save_s"], s["restart_s"], s["mtbf_s"])
    ax.plot(taus, [first_order_goodput(t, *args) for t in taus], label="first-order model (Young)")
    ax.plot(taus, [expected_goodput(t, *args) for t in taus], "--", label="exact model (Daly)")
    ax.plot([r["interval_s"] for r in rows], [r["goodput"] for r in rows], "o", label="measured")
    for r in rows:
        ax.annotate(f"{r['kills']} kill" + ("" if r["kills"] == 1 else "s"), (r["interval_s"], r["goodput"]), fontsize=8,
                    textcoords="offset points", xytext=(4, 4))
    ax.axhline(s["ceiling"], color="grey", lw=0.8, label="no failure, no save")
    ax.axvline(s["young_s"], color="grey", lw=0.8, ls=":", label=f"Young {s['young_s']:.2f} s")
    ax.set(xscale="log", xlabel="seconds of work between saves", ylabel="goodput", ylim=(0, 1.05),
           title=f"How often to save ({s['label']}; M = {s['mtbf_s']:g} s assumed)")
    ax.legend(fontsize=8)
    return ax
