"""Launch the benchmark's set-ups in turns, so that a slow minute of a shared machine hits them all.

    setups = lab_setups([0, MiB], [1, 10])                          # {name: (engine, env)}
    launches = in_rounds(setups, rounds=3, args=ARGS)               # {name: [row, row, row]}
    pool = pooled(launches["ddp"], "ddp x2")                        # one row: mean ± over them

Round r launches every set-up once, the order rotated by r (A B C, then B C A, then C A B ...), so
no set-up is always first or always right after the same other one. Launched one after the
other, set-ups minutes apart meet different machines (another program starts) and that drift
shows up as a difference between them; launched in turns, a slow minute slows all of them alike.

A pooled row's img/s is the mean of its launches' total img/s (each the ranks' mean rates summed),
its ± the 95 % CI over those launches (`launch_spread`, Student-t, n = launches), and its step time
comes from the same numbers (workers x batch / img/s: one estimator for both columns). Iterations
inside one launch move together, so they are not pooled into the interval (`iterations` only counts
them). Two set-ups are compared round by round (`paired.ratio`): that ratio's interval is the verdict's.
"""
from __future__ import annotations

import math

from dltutor.core.rounds import rotated
from dltutor.core.spread import mean_ci

LAB = "horovod (lab settings)"
DDP = "ddp"


def fusion_name(nbytes: int) -> str:
    return f"horovod fusion={int(nbytes)}"


def cycle_name(ms: float) -> str:
    return f"horovod cycle={float(ms):g}ms"


def lab_setups(fusion_bytes=(), cycle_ms=(), on_gpu: bool = False) -> dict:
    """{name: (engine, extra env)}: Horovod with the lab's settings, DDP, and one Horovod set-up per
    sweep value that differs from the lab's own (on CPU workers `benchmark.HOROVOD_CPU_SETTINGS`,
    on GPUs Horovod's defaults): the lab's launches stand for that value in its sweep."""
    from dltutor.horovod.benchmark import HOROVOD_CPU_SETTINGS, HOROVOD_DEFAULTS
    lab = HOROVOD_DEFAULTS if on_gpu else HOROVOD_CPU_SETTINGS
    setups = {LAB: ("horovod", {}), DDP: ("ddp", {})}
    for b in fusion_bytes:
        if int(b) != int(lab["HOROVOD_FUSION_THRESHOLD"]):
            setups[fusion_name(b)] = ("horovod", {"HOROVOD_FUSION_THRESHOLD": str(int(b))})
    for ms in cycle_ms:
        if float(ms) != float(lab["HOROVOD_CYCLE_TIME"]):
            setups[cycle_name(ms)] = ("horovod", {"HOROVOD_CYCLE_TIME": f"{float(ms):g}"})
    return setups


def in_rounds(setups: dict, rounds: int, args, nproc: int = 2, env=None, timeout: float = 900.0,
              launch=None, echo=print) -> dict:
    """{name: [row of each round]}: every set-up launched once per round, order rotated per round.
    `env` adds variables to every launch (the notebook's RankPlan.env)."""
    from dltutor.horovod.runs import run_benchmark
    launch = launch or run_benchmark
    out = {name: [] for name in setups}
    for r in range(rounds):
        for name in rotated(list(setups), r):
            engine, extra = setups[name]
            row = launch(engine, nproc, args, env={**(env or {}), **extra}, timeout=timeout,
                         echo=False, label=f"{name} x{nproc} (round {r + 1})")
            row["round"] = r + 1
            out[name].append(row)
            if echo:
                echo(f"round {r + 1}/{rounds}  {name:28s} {row['total_img_sec']:8.2f} img/s total, "
                     f"{1000 * row['step_time_s']:6.0f} ms/step")
    return out


def iteration_totals(row: dict) -> list[float]:
    """The total img/s of each timed iteration of one launch (`runs.row_from_result` keeps them)."""
    return list(row.get("iter_totals") or [])


def launch_spread(rows: list[dict]) -> float:
    """95 % CI over the launches' own mean total img/s (nan below two launches)."""
    return mean_ci([r["total_img_sec"] for r in rows])


def pooled(rows: list[dict], label: str) -> dict:
    """One row for the launches of one set-up (see the module's text)."""
    from dltutor.horovod.paired import per_round
    if not rows:
        raise ValueError(f"{label}: no launches to pool")
    means = [r["total_img_sec"] for r in rows]
    mean = sum(means) / len(means)
    ci = launch_spread(rows)
    first = rows[0]
    step = first["workers"] * first["batch_size"] / mean if mean else math.nan
    return {**{k: first.get(k) for k in ("engine", "workers", "device", "model", "batch_size",
                                         "image_size", "threads", "cycle_time_ms",
                                         "fusion_threshold_bytes")},
            "run": label, "launches": len(rows),
            "iterations": sum(len(iteration_totals(r)) for r in rows),
            "total_img_sec": mean, "img_sec_per_worker": mean / first["workers"],
            "total_img_sec_ci": ci, "step_time_s": step,
            "step_time_ci_s": step * ci / mean if mean else math.nan,
            "launch_means": means, "launch_ci": ci, "round_img_sec": per_round(rows)}


def pool_all(launches: dict, nproc: int) -> dict:
    """{name: pooled row} for `in_rounds`' result."""
    return {name: pooled(rows, f"{name} x{nproc}, {len(rows)} launch{'es' * (len(rows) > 1)}")
            for name, rows in launches.items()}


def sweep_points(pools: dict, key: str) -> list[tuple[float, float, float, str]]:
    """(value of `key`, s/step, its 95 % CI, run) of every Horovod pool, sorted by value: the lab's
    pool and the pools that changed `key` (`runs.SETTING_KEYS` names the keys)."""
    other = {"fusion_threshold_bytes": "cycle=", "cycle_time_ms": "fusion="}[key]
    return sorted((float(p[key]), p["step_time_s"], p["step_time_ci_s"], p["run"])
                  for name, p in pools.items()
                  if p["engine"] == "horovod" and other not in name)


def sweep_ratios(pools: dict, launches: dict, key: str) -> list[tuple[float, dict]]:
    """(value of `key`, `paired.step_ratio` against the lab's launches) for every set-up that
    changed `key`, sorted by value: each value's step time over the lab's, paired by round."""
    from dltutor.horovod.paired import step_ratio
    prefix = {"fusion_threshold_bytes": "horovod fusion=", "cycle_time_ms": "horovod cycle="}[key]
    return sorted((float(pools[name][key]), step_ratio(rows, launches[LAB]))
                  for name, rows in launches.items() if name.startswith(prefix))
