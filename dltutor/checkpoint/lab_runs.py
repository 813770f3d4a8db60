"""Notebook 10's runs of lab 10 (course/labs/10_checkpoint/train.py), and the numbers they give.

    root = fresh_root()                                   # a new folder under the runs folder
    whole = lab_run(root, "ddp-whole", ["--tiny", "--wrap", "ddp"])          # one launch
    pair = resume_runs(root, "ddp", ["--tiny"], stop_at=3, whole=whole)      # stop, then resume
    resume_gap(pair)        # {"loss_max_diff", "first_diff_step", "param_max_diff", ...}
    left_out(root, pair)                                  # resumed again, one part left out
    reshard_runs(root, ["--tiny"], save_ranks=4, load_on=(2, 3, 1))   # saved on 4, loaded on 2, 3, 1
    restart_runs(root, ["--tiny"], kill_at=5, kill_during_save=6, whole=whole)   # under torchrun

Every run is a real launch of the lab on gloo ranks (dltutor.launch.run.launch; torchrun for the
restarts, dltutor.checkpoint.restarts.torchrun) with a checkpoint folder of its own under `root`,
and rank 0 writes the final full parameters (`--save-params`) for an exact comparison. A run is
a dict: {"name", "args", "metrics": each rank's DLTUTOR_METRICS record (rank order), "params":
the parameters file, "ckpt_dir"}. Losses are compared per rank and step with `==` (the floats
travel through JSON unchanged), parameters with compare.max_abs_diff (0.0: bit for bit).
"""
from __future__ import annotations

import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from dltutor.checkpoint import compare, restarts, store
from dltutor.checkpoint.state import PARTS
from dltutor.core import env
from dltutor.core.course import lab
from dltutor.core.device import CPU_ONLY_ENV, plan_ranks
from dltutor.launch.restart import signal_name
from dltutor.launch.run import launch

LAB = "10_checkpoint/train.py"
RESHARD_PARTS = "model,optimizer"      # the rng part holds one state per rank: it cannot reshard
NPROC = 2                              # ranks of every run but the reshard's


def rank_plan():
    """Where the 2-rank runs go: one rank per GPU on a node with 2 or more, else the CPU (gloo,
    the GPUs hidden); its `note` says why when GPUs are left unused."""
    return plan_ranks([NPROC], need=NPROC)


def fresh_root(notebook: str = "10") -> Path:
    """A new, empty folder for this notebook's runs: `<runs_dir>/<notebook>-<time>-<id>`."""
    return env.made(env.runs_dir() / f"{notebook}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")


def lab_run(root, name: str, args, nproc: int = NPROC, ckpt: str | None = None, backend: str = "local",
            cpu: bool = False) -> dict:
    """Launch lab 10 on `nproc` ranks with `args`, checkpoints in `root/<ckpt or name>` and the final
    parameters in `root/<name>.pt`; the run as a dict (see the module's docstring). `cpu`: hide the
    GPUs (gloo ranks, as many as asked, sharing the cores)."""
    root = Path(root)
    ckpt_dir = root / (ckpt or name)
    params = root / f"{name}.pt"
    full = [*map(str, args), "--ckpt-dir", str(ckpt_dir), "--save-params", str(params)]
    res = launch(lab(LAB), nproc=nproc, args=full, backend=backend, echo=False,
                 log_dir=root / "logs" / name, env=CPU_ONLY_ENV if cpu else rank_plan().env,
                 oversubscribe=cpu, timeout=600)
    return {"name": name, "args": full, "metrics": list(res.metrics), "params": params,
            "ckpt_dir": ckpt_dir}


def losses_by_step(*runs) -> dict[int, dict[int, float]]:
    """{rank: {step: loss}} over one or more runs (a later run's step wins)."""
    out: dict[int, dict[int, float]] = {}
    for run in runs:
        for m in run["metrics"]:
            steps = out.setdefault(m["rank"], {})
            for i, loss in enumerate(m["losses"]):
                steps[m["first_step"] + 1 + i] = loss
    return out


def params_of(run) -> dict:
    """The final full parameters rank 0 of `run` saved."""
    return torch.load(run["params"], map_location="cpu", weights_only=True)


def loss_gap(whole, *pieces) -> dict:
    """The losses of `pieces` (first segment, resumed segment) against `whole`'s, step by step on
    every rank: {"steps": how many (rank, step) pairs, "loss_max_diff", "first_diff_step" (None
    when every loss is equal)}."""
    a, b = losses_by_step(whole), losses_by_step(*pieces)
    pairs = [(s, a[r][s], b[r][s]) for r in sorted(a) for s in sorted(a[r]) if s in b.get(r, {})]
    differ = [s for s, x, y in pairs if x != y]
    return {"steps": len(pairs), "loss_max_diff": max((abs(x - y) for _, x, y in pairs), default=0.0),
            "first_diff_step": min(differ) if differ else None}


def resume_gap(pair: dict) -> dict:
    """How a stopped-and-resumed run compares with the uninterrupted one (`resume_runs`' dict):
    loss_gap's numbers plus the wrap, the stop step, the step the resume started from, the largest
    parameter difference and whether the parameters' sha256 digests are equal."""
    whole, first, resumed = pair["whole"], pair["first"], pair["resumed"]
    m0 = resumed["metrics"][0]
    return {"wrap": m0["wrap"], "world_size": m0["world_size"], "stop_at": pair["stop_at"],
            "resumed_from": m0["resumed_from"], "total_steps": m0["steps"],
            **loss_gap(whole, first, resumed),
            "param_max_diff": compare.max_abs_diff(params_of(whole), params_of(resumed)),
            "same_digest": whole["metrics"][0]["param_digest"] == m0["param_digest"],
            "hardware": m0["hardware"]}


def resume_runs(root, wrap: str, size, stop_at: int, whole=None, parts=PARTS, tag: str = "") -> dict:
    """An uninterrupted run (or `whole`, if given), then the same command with --stop-at, then
    once more without it on the same checkpoint folder: {"whole", "first", "resumed", "stop_at"}."""
    args = [*size, "--wrap", wrap]
    whole = whole or lab_run(root, f"{wrap}-whole", args)
    name = f"{wrap}-resume{tag}"
    with_parts = [*args, "--ckpt-parts", ",".join(parts)]
    first = lab_run(root, f"{name}-first", [*with_parts, "--stop-at", stop_at], ckpt=name)
    resumed = lab_run(root, f"{name}-second", with_parts, ckpt=name)
    return {"whole": whole, "first": first, "resumed": resumed, "stop_at": stop_at}


def left_out(root, pair: dict, parts=("rng", "optimizer", "data")) -> dict:
    """For each part in `parts`: resume the stopped run of `pair` (resume_runs' dict) once more from
    a copy of its checkpoint, restoring every part but that one (`--ckpt-parts`); {part:
    resume_gap's numbers against the pair's uninterrupted run, and "curve": rank 0's (steps,
    losses)}."""
    first, stop_at, out = pair["first"], pair["stop_at"], {}
    args = [a for a in first["args"][:first["args"].index("--ckpt-parts")]]
    for part in parts:
        name = f"{first['name'].removesuffix('-first')}-no-{part}"
        for step, path in store.checkpoints(first["ckpt_dir"]):
            if step <= stop_at:        # the folders the stopped run left, not the resume's
                shutil.copytree(path, Path(root) / name / path.name)
        kept = ",".join(p for p in PARTS if p != part)
        resumed = lab_run(root, name, [*args, "--ckpt-parts", kept])
        trial = {**pair, "resumed": resumed}
        out[part] = {"left_out": part, **resume_gap(trial), "curve": curve(first, resumed)}
    return out


def reshard_runs(root, size, save_ranks: int = 4, load_on=(2, 3, 1), wrap: str = "fsdp2") -> dict:
    """Train and save on `save_ranks` FSDP2 ranks (parts model,optimizer), then load that checkpoint
    on each count in `load_on` (1: one process, no process group) and take the parameters, and
    convert it with dcp_to_torch: {"saved": run, "step", "rows": one per load (ranks, how,
    param_max_diff, same_digest), plus the conversion's row}. On CPU/gloo even on a GPU node:
    more ranks than GPUs, on purpose (a reshard needs no GPU)."""
    args = [*size, "--wrap", wrap, "--ckpt-parts", RESHARD_PARTS]
    saved = lab_run(root, f"reshard-save-{save_ranks}", args, nproc=save_ranks, ckpt="reshard", cpu=True)
    step, ref = saved["metrics"][0]["steps"], params_of(saved)
    rows = []
    with ThreadPoolExecutor(1) as pool:     # torch's converter runs while the loads do
        converted = pool.submit(compare.to_torch_file, store.step_dir(saved["ckpt_dir"], step),
                                Path(root) / "reshard.torch.pt")
        for n in load_on:   # no steps left to train: the run loads, gathers and writes the parameters
            run = lab_run(root, f"reshard-load-{n}", [*args, "--steps", step], nproc=n, ckpt="reshard",
                          backend="local" if n > 1 else "python", cpu=True)
            m0 = run["metrics"][0]
            rows.append({"loaded_on": f"{n} ranks" if n > 1 else "one process, no process group",
                         "ranks": n, "wrap": m0["wrap"], "resumed_from": m0["resumed_from"],
                         "param_max_diff": compare.max_abs_diff(ref, params_of(run)),
                         "same_digest": m0["param_digest"] == saved["metrics"][0]["param_digest"]})
        model = dict(compare.read_torch_file(converted.result())["model"])
    rows.append({"loaded_on": "a dcp_to_torch file", "ranks": 0, "wrap": "torch.load",
                 "resumed_from": step, "param_max_diff": compare.max_abs_diff(ref, model),
                 "same_digest": compare.digest(model) == saved["metrics"][0]["param_digest"]})
    return {"saved": saved, "step": step, "save_ranks": save_ranks, "wrap": wrap, "rows": rows,
            "hardware": saved["metrics"][0]["hardware"]}


RESTART_CASES = {"rank killed": "torchrun", "save killed": "launch"}   # kind -> who restarts it


def restart_runs(root, size, kill_at: int, kill_during_save: int, whole, max_restarts: int = 1,
                 timeout: float = 300.0, cases=None) -> dict:
    """DDP runs restarted after a failure on their first attempt: rank 1 SIGKILLed after step
    `kill_at` ("rank killed"), rank 0 killed inside step `kill_during_save`'s save, a torn folder
    ("save killed"); each restarted by `cases[kind]`: "torchrun" (`torchrun --max-restarts`,
    dltutor.checkpoint.restarts.torchrun) or "launch" (the course's launch(max_restarts=...), the
    warm start). {kind: one row of numbers}, each against the uninterrupted `whole`."""
    out = {}
    flags = {"rank killed": ["--kill-at", kill_at, "--kill-rank", 1],
             "save killed": ["--kill-during-save", kill_during_save]}
    for kind, via in (cases or RESTART_CASES).items():
        name = "restart-" + kind.split()[0]
        ckpt, params = Path(root) / name, Path(root) / f"{name}.pt"
        args = [*size, "--wrap", "ddp", *flags[kind], "--ckpt-dir", ckpt, "--save-params", params]
        res = _restarted(via, args, Path(root) / "logs" / name, max_restarts, timeout)
        m0 = res["metrics"].get(0, {})
        row = {"kind": kind, "via": via, "rc": res["rc"], "restart_count": m0.get("restart_count"),
               "max_restarts": max_restarts, "killed_rank": m0.get("killed_rank"),
               "killed_step": m0.get("killed_step"), "kill_where": m0.get("kill_where"),
               "resumed_from": m0.get("resumed_from"), "steps_redone": m0.get("steps_redone"),
               "kill_to_training_s": m0.get("kill_to_training_s"),
               "skipped": m0.get("skipped") or {}, "steps": m0.get("steps"),
               "hardware": m0.get("hardware"), "launcher": res["lines"]}
        done = res["rc"] == 0 and params.is_file()
        row["param_max_diff"] = compare.max_abs_diff(params_of(whole), params_of({"params": params})) if done else None
        row["same_digest"] = done and m0.get("param_digest") == whole["metrics"][0]["param_digest"]
        out[kind] = row
    return out


def _restarted(via: str, args, log_dir: Path, max_restarts: int, timeout: float) -> dict:
    """One run restarted by torchrun or by the course's launch: {"rc", "metrics": {rank: record},
    "lines": what the restarter said about the failure and the restart}."""
    if via == "torchrun":
        res = restarts.torchrun(lab(LAB), NPROC, args, log_dir=log_dir, max_restarts=max_restarts,
                                timeout=timeout, env=rank_plan().env)
        lines = [ln for ln in res["launcher"].splitlines()
                 if any(k in ln for k in ("exitcode", "closing signal", "Restarting", "will restart"))]
        return {"rc": res["rc"], "metrics": res["metrics"], "lines": lines}
    res = launch(lab(LAB), nproc=NPROC, args=[str(a) for a in args], log_dir=log_dir, echo=False,
                 timeout=timeout, max_restarts=max_restarts, env=rank_plan().env)
    lines = [f"attempt {r.attempt} ended {r.failed_at_s:.2f} s into the launch: rank "
             f"{', '.join(map(str, r.ranks))} blamed; " + (", ".join(
                 f"rank {k}: {signal_name(c)}" for k, c in r.exit_codes.items()) or "no exit codes read")
             + f"; every rank started again at {r.restarted_at_s:.2f} s" for r in res.restarts]
    return {"rc": res.returncode, "metrics": {m["rank"]: m for m in res.metrics}, "lines": lines}


def curve(*runs, rank: int = 0) -> tuple[list[int], list[float]]:
    """(steps, losses) of `rank` over `runs` in step order (a stopped run and its resume: one curve)."""
    steps = losses_by_step(*runs).get(rank, {})
    return sorted(steps), [steps[s] for s in sorted(steps)]
