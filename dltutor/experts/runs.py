"""From the kernel: run lab 09's moe.py on N ranks and turn the ranks' reports into rows.

    exact = run_check(ranks=(2, 4))     expert parallelism vs one process (fp64), per world size
    check_rows(exact)                   the largest differences per case
    study = run_study(nproc=2)          four launches: the course's layer (and the sweeps), DeepSpeed's,
                                        and a skewed router trained with and without the aux loss
    load_rows(study)                    expert load share over steps, with and without the aux loss
    drop_rows(study)                    dropped fraction per (skew, capacity factor)
    straggler_rows(study)               max/mean rows per rank and the slowest rank's time, per skew
    alltoall_points(study); fit_alltoall(points)   all-to-all time vs bytes, alpha-beta fitted
    side_by_side(study)                 the course's layer and DeepSpeed's, step by step

Fast mode (DLTUTOR_FAST) runs the lab's --tiny preset with a few more steps; full mode its defaults.
"""
from __future__ import annotations

import math

from dltutor.allreduce.cost import fit_alpha_beta, model_time
from dltutor.core import env
from dltutor.core.course import lab
from dltutor.core.spread import mean_and_ci
from dltutor.launch.run import launch

LAB = "09_long_context/moe.py"
FAST = {"tiny": True, "steps": 40, "sweep_skews": "0,0.5,1,2", "sweep_capacity": "1,1.25,1.5,2",
        "sweep_tokens": "32,128,512,2048", "repeats": 4}
FULL = {"steps": 800, "repeats": 30, "sweep_tokens": "64,256,1024,4096,16384"}


def _flags(**kw) -> list[str]:
    out = []
    for k, v in kw.items():
        if v is None or v is False:
            continue
        out += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    return out


def run_lab(nproc: int = 2, echo: bool = False, timeout: float = 900, **flags) -> list[dict]:
    """moe.py on `nproc` ranks with the lab's `flags` (e.g. tiny=True, impl="deepspeed"):
    every rank's report, sorted by rank."""
    result = launch(lab(LAB), nproc=nproc, args=_flags(**flags), threads=1, echo=echo, timeout=timeout)
    return result.metrics


def run_check(ranks=(2, 4), echo: bool = False) -> dict:
    """moe.py --check on each number of ranks: {world_size: every rank's report}."""
    return {n: launch(lab(LAB), nproc=n, args=["--check"], threads=1, echo=echo, timeout=300,
                      oversubscribe=n > 2).metrics for n in ranks}


def check_rows(exact: dict) -> list[dict]:
    """One row per (ranks, case): the largest difference over the ranks, per quantity."""
    rows = []
    for n, reports in exact.items():
        for i, case in enumerate(reports[0]["check"]):
            per_rank = [r["check"][i] for r in reports]
            rows.append({"ranks": n, "top_k": case["top_k"],
                         "capacity_factor": case["cf"] if case["cf"] is not None else "none",
                         "no_token": ", ".join(map(str, case["empty"])) or "-",
                         "dropped": max(c["dropped"] for c in per_rank),
                         **{k: max(c[k] for c in per_rank)
                            for k in ("out_err", "dx_err", "gate_err", "expert_err")}})
    return rows


def run_study(nproc: int = 2, aux_weight: float = 0.1, train_skew: float = 2.0, echo: bool = False,
              **flags) -> dict:
    """The four runs the notebook shows, same seed and data: `course` (the course's layer, no skew,
    also the sweeps) and `deepspeed` (DeepSpeed's layer, same flags); `aux` and `no_aux` (the
    course's layer trained with expert 0's logit biased by `train_skew`, with the auxiliary loss
    at `aux_weight` and without it)."""
    base = {**(FAST if env.fast_mode() else FULL), **flags}
    quiet = {**base, "sweep_skews": "", "sweep_tokens": ""}
    return {"course": run_lab(nproc, echo, aux_weight=aux_weight, **base),
            "deepspeed": run_lab(nproc, echo, aux_weight=aux_weight, impl="deepspeed", **quiet),
            "aux": run_lab(nproc, echo, aux_weight=aux_weight, skew=train_skew, **quiet),
            "no_aux": run_lab(nproc, echo, aux_weight=0, skew=train_skew, **quiet)}


def share_over_steps(reports: list[dict]) -> tuple[list[int], list[list[float]]]:
    """(steps, share[e][step]): each expert's share of the slots routed by ALL ranks, per step."""
    steps = [s["step"] for s in reports[0]["steps"]]
    shares = []
    for i in range(len(steps)):
        load = [sum(r["steps"][i]["load"][e] for r in reports) for e in range(len(reports[0]["steps"][i]["load"]))]
        total = sum(load) or 1
        shares.append([x / total for x in load])
    return steps, [list(col) for col in zip(*shares)]


def imbalance(reports: list[dict]) -> list[float]:
    """Per step: the busiest expert's load over the mean load (1 = perfectly even), all ranks."""
    _, shares = share_over_steps(reports)
    return [max(col) * len(shares) for col in zip(*shares)]


def load_rows(study: dict) -> list[dict]:
    """With and without the aux loss: max/mean expert load over the first and the last quarter of
    the steps (mean, ± 95 % CI over those steps), final loss and test accuracy."""
    rows = []
    for key, name in (("aux", "with aux loss"), ("no_aux", "without aux loss")):
        reps = study[key]
        imb = imbalance(reps)
        n = max(len(imb) // 4, 2)
        first, first_ci = mean_and_ci(imb[:n])
        end, end_ci = mean_and_ci(imb[-n:])
        rows.append({"run": name, "aux weight": reps[0]["aux_weight"], "max/mean load, first steps": first,
                     "± first": first_ci, "max/mean load, last steps": end, "± last": end_ci,
                     "steps averaged": n, "final loss": reps[0]["steps"][-1]["loss"],
                     "test accuracy": reps[0]["test_accuracy"], "test images": reps[0]["test_images"]})
    return rows


def drop_rows(study: dict) -> list[dict]:
    """Dropped fraction of all ranks' slots per (skew, capacity factor), with the capacity used."""
    reps, rows = study["course"], []
    for i, point in enumerate(reps[0]["sweep"]):
        parts = [r["sweep"][i] for r in reps]
        slots = sum(sum(p["load"]) for p in parts)
        dropped = sum(p["dropped_fraction"] * sum(p["load"]) for p in parts)
        rows.append({"skew": point["skew"], "capacity factor": point["capacity_factor"],
                     "capacity": point["capacity"], "dropped fraction": dropped / slots if slots else 0.0,
                     "slots": slots})
    return rows


def straggler_rows(study: dict) -> list[dict]:
    """Per skew, no capacity limit: rows each rank's experts processed (max/mean over ranks), each
    rank's expert time (mean over the repeats), and the busiest rank's time over the least busy
    one's, paired repeat by repeat (both ranks time the same forward: machine noise hits both),
    mean ± 95 % CI, beside the ratio of their rows; and, paired the same way, how much longer the
    least busy rank spent in the all-to-alls than the busiest (its wait at the combine) beside how
    much longer the busiest rank's experts ran."""
    reps, rows = study["course"], []
    for i, point in enumerate(reps[0]["sweep"]):
        if point["capacity_factor"] != "none":
            continue
        parts = [r["sweep"][i] for r in reps]
        per_rank = [p["expert_rows"] for p in parts]
        busy = max(range(len(parts)), key=lambda k: per_rank[k])
        least = min(range(len(parts)), key=lambda k: per_rank[k])
        ratio, ratio_ci = mean_and_ci([b / a for b, a in zip(parts[busy]["experts_s"],
                                                             parts[least]["experts_s"]) if a > 0])
        wait, wait_ci = mean_and_ci([(a - b) * 1e3 for a, b in zip(parts[least]["alltoall_s"],
                                                                   parts[busy]["alltoall_s"])])
        extra, extra_ci = mean_and_ci([(b - a) * 1e3 for b, a in zip(parts[busy]["experts_s"],
                                                                    parts[least]["experts_s"])])
        rows.append({"skew": point["skew"], "rows per rank": per_rank,
                     "max/mean rows": max(per_rank) / (sum(per_rank) / len(per_rank)),
                     "expert ms per rank": [round(mean_and_ci(p["experts_s"])[0] * 1e3, 3) for p in parts],
                     "± expert ms per rank": [round(mean_and_ci(p["experts_s"])[1] * 1e3, 3) for p in parts],
                     "busiest rank": busy, "least busy rank": least,
                     "rows ratio": per_rank[busy] / max(per_rank[least], 1),
                     "time ratio": ratio, "± time ratio": ratio_ci, "repeats": len(parts[busy]["experts_s"]),
                     "extra expert ms": extra, "± extra": extra_ci, "wait ms": wait, "± wait": wait_ci})
    return rows


def alltoall_points(study: dict) -> list[dict]:
    """(bytes, seconds) of one all-to-all on rank 0: half of each forward's two (dispatch and
    combine), from every repeat of the token sweep."""
    out = []
    for point in study["course"][0]["timing"]:
        for t in point["alltoall_s"]:
            out.append({"tokens": point["tokens"], "bytes": point["bytes_sent"] / 2, "seconds": t / 2,
                        "hardware": study["course"][0]["hardware"]})
    return out


def fit_alltoall(points: list[dict]) -> dict:
    """alpha (s) and beta (s/byte) of t = alpha + bytes*beta, fitted with notebook 05's
    dltutor.allreduce.cost.fit_alpha_beta (relative least squares), and the model at each point."""
    usable = [p for p in points if p["bytes"] > 0 and p["seconds"] > 0]
    if len(usable) < 2:
        raise ValueError("the all-to-all fit needs two or more points that sent bytes: run 2+ ranks")
    alpha, beta = fit_alpha_beta([p["bytes"] for p in usable], [p["seconds"] for p in usable])
    return {"alpha": alpha, "beta": beta, "points": usable, "hardware": usable[0].get("hardware", ""),
            "model": [float(model_time("pingpong", 2, p["bytes"], alpha, beta)) for p in usable]}


def side_by_side(study: dict) -> list[dict]:
    """Step by step, rank 0: the course's layer and DeepSpeed's (same seed, data and weights at
    the start): loss, aux loss, load and dropped fraction."""
    rows = []
    for c, d in zip(study["course"][0]["steps"], study["deepspeed"][0]["steps"]):
        rows.append({"step": c["step"], "course loss": c["loss"], "DeepSpeed loss": d["loss"],
                     "course aux": c["aux"], "DeepSpeed l_aux": d["aux"], "course load": c["load"],
                     "DeepSpeed exp_counts": d["load"], "course dropped": c["dropped_fraction"],
                     "DeepSpeed dropped": d["dropped_fraction"], "course capacity": c["capacity"],
                     "DeepSpeed capacity": d["capacity"]})
    return rows
