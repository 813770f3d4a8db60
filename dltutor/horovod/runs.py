"""Inside the kernel: run the synthetic benchmark lab (Horovod or its DDP twin) and tabulate it.

    row = run_benchmark("horovod", nproc=2, args=["--tiny"])
    rows = scaling_table([row1, row2], rate="total_img_sec", ranks="workers", group="engine")

Runs go through `dltutor.launch.run` (horovodrun for 'horovod': --gloo on the CPU, no flag on a GPU
node whose Horovod has NCCL/MPI; torchrun for 'ddp'), so they
get its live rank-prefixed output, timeouts, clean-up and rank-named errors. A row holds the
measured numbers of one launch: img/s per worker (mean over ranks), total img/s (sum over ranks),
seconds per step, and the rank-0 summary exactly as the lab printed it.
"""
from __future__ import annotations

import math
from pathlib import Path

from dltutor.core import course
from dltutor.core.sources import QUOTES, figure
from dltutor.ddp.scaling import speedup, weak_efficiency
from dltutor.grading.numbers import as_float, kind
from dltutor.horovod import benchmark

LABS = {"horovod": "03_horovod/pytorch_synthetic_benchmark.py",
        "ddp": "03_horovod/ddp_synthetic_benchmark.py"}
BACKEND = {"horovod": "horovod", "ddp": "local"}

# The course seed (seed 001, OSU HiDL lab 1): Horovod's synthetic benchmark, ResNet-50, batch 64,
# V100 GPUs. Quoted from dltutor.core.sources, not measured here. Task 1: 1 node x 1 GPU; task 2:
# 2 nodes x 1 GPU launched with MVAPICH-Plus `mpirun_rsh` (the all-reduce crosses the network,
# not NVLink). Speed-up and efficiency are computed from the quoted totals.
SEED_1GPU_TOTAL = figure("hvd_1gpu_total")        # 336.0 img/s
SEED_2GPU_PER_GPU = figure("hvd_2gpu_per_gpu")    # 325.2 img/s per GPU
SEED_2GPU_TOTAL = figure("hvd_2gpu_total")        # 650.3 img/s on 2 GPUs


def seed_reference() -> list[dict]:
    """The seed's two Horovod runs as rows of a scaling table (REFERENCE, not measured here)."""
    rows = [("REFERENCE: seed 001, 1 node x 1 V100 (not measured here)", 1,
             figure("hvd_1gpu_per_gpu"), SEED_1GPU_TOTAL, QUOTES["hvd_1gpu_total"].what),
            ("REFERENCE: seed 001, 2 nodes x 1 V100, mpirun_rsh (not measured here)", 2,
             SEED_2GPU_PER_GPU, SEED_2GPU_TOTAL, QUOTES["hvd_2gpu_total"].what)]
    return [{"run": run, "workers": n, "img_sec_per_worker": per, "total_img_sec": total,
             "speedup": speedup(total, SEED_1GPU_TOTAL),
             "efficiency": weak_efficiency(total, SEED_1GPU_TOTAL, n), "source": what}
            for run, n, per, total, what in rows]


V100_REFERENCE = seed_reference()


def lab_path(engine: str) -> Path:
    try:
        return course.lab(LABS[engine])
    except KeyError:
        raise ValueError(f"engine must be one of {sorted(LABS)}, got {engine!r}") from None


def benchmark_args(model="resnet50", batch_size=64, image_size=224, warmup=10,
                   batches_per_iter=10, iters=10, no_cuda=False, threads=0,
                   extra=()) -> list[str]:
    """The lab's command-line flags for these sizes (threads=0: share the cores)."""
    args = ["--model", model, "--batch-size", batch_size, "--image-size", image_size,
            "--num-warmup-batches", warmup, "--num-batches-per-iter", batches_per_iter,
            "--num-iters", iters, "--threads", threads, *extra]
    if no_cuda:
        args.append("--no-cuda")
    return [str(a) for a in args]


def row_from_result(engine: str, nproc: int, result, label: str | None = None) -> dict:
    """One table row from a LaunchResult of the lab."""
    metrics = result.metrics
    if len(metrics) != nproc:
        raise RuntimeError(f"{engine} run on {nproc} workers reported {len(metrics)} "
                           f"DLTUTOR_METRICS lines; logs: {result.log_dir}")
    printed = benchmark.parse_output(Path(result.logs[0]).read_text())
    per_rank = [m["img_sec_per_worker"] for m in metrics]
    return {"run": label or f"{engine} x{nproc}", "engine": engine, "workers": nproc,
            "device": metrics[0]["device"], "model": metrics[0]["model"],
            "batch_size": metrics[0]["batch_size"], "image_size": metrics[0]["image_size"],
            "threads": metrics[0]["threads"],
            "cycle_time_ms": metrics[0].get("cycle_time_ms"),  # Horovod only
            "fusion_threshold_bytes": metrics[0].get("fusion_threshold_bytes"),
            "img_sec_per_worker": sum(per_rank) / nproc, "total_img_sec": sum(per_rank),
            "img_sec_conf": max(m["img_sec_conf"] for m in metrics),
            "step_time_s": max(m["step_time_s"] for m in metrics),
            **iteration_ci(metrics),
            "per_rank": per_rank, "printed": printed, "wall_time_s": result.wall_time}


def iteration_ci(metrics: list[dict]) -> dict:
    """The course's ± of a run: the 95 % CI of the mean total img/s over its timed iterations (the
    ranks' rates of iteration k summed; `core.spread.mean_ci`; nan below 2 iterations), and that
    relative CI applied to the step time; `iter_totals` keeps those sums (`rounds.pooled`
    pools them over launches). The benchmark's own printed "+-" (`img_sec_conf`) is
    1.96 sigma of single iterations: how much one iteration varies, kept as the classic line."""
    from dltutor.core.spread import mean_ci
    iters = [m.get("img_sec") or [] for m in metrics]
    n = min(len(r) for r in iters)
    totals = [sum(r[k] for r in iters) for k in range(n)]
    total_ci = mean_ci(totals)
    step_s = max(m["step_time_s"] for m in metrics)
    rel = total_ci / (sum(totals) / n) if n else float("nan")
    return {"total_img_sec_ci": total_ci, "step_time_ci_s": step_s * rel, "iter_totals": totals}


def run_benchmark(engine: str, nproc: int, args=(), env=None, timeout: float = 900.0,
                  echo: bool = True, label: str | None = None) -> dict:
    """Launch the `engine` lab on `nproc` local workers and return its row."""
    import os

    from dltutor.launch.run import launch
    load = os.getloadavg()[0]   # the machine's 1-minute load as the launch starts (shared cores)
    result = launch(lab_path(engine), nproc=nproc, args=list(args), backend=BACKEND[engine],
                    env=env, timeout=timeout, echo=echo)
    return {**row_from_result(engine, nproc, result, label), "load_1m": load}


SETTING_KEYS = {"HOROVOD_FUSION_THRESHOLD": "fusion_threshold_bytes",
                "HOROVOD_CYCLE_TIME": "cycle_time_ms"}


def sweep_setting(name: str, values, args, nproc: int = 2, done: dict | None = None,
                  timeout: float = 900.0, env=None) -> list[tuple[float, float, float, str]]:
    """(value, seconds per step, its 95 % CI, run) of the Horovod lab for each value of
    the environment variable `name`.

    `done` is a Horovod row already measured: its own value (as the lab reported it) joins the
    sweep without a new run when it is not among `values`. `env` adds variables for every run
    (the notebook's RankPlan.env: on a node with fewer GPUs than workers, the CPU).
    """
    key = SETTING_KEYS[name]

    def point(row, run):
        return float(row[key]), row["step_time_s"], row["step_time_ci_s"], run

    out = [point(run_benchmark("horovod", nproc, args, env={**(env or {}), name: str(v)},
                               timeout=timeout, echo=False), f"{name}={v}") for v in values]
    if done is not None and float(done[key]) not in {p[0] for p in out}:
        out.append(point(done, f"{done['run']} (run above)"))
    return sorted(out)


# Cases the student's function has not seen (total of 1 worker, total of n, n): a formula that
# only holds for n = 2, or typed-in numbers, fails them.
UNSEEN = ((120.0, 400.0, 4), (50.0, 360.0, 8), (210.0, 610.0, 3))


def _efficiency_problem(fn, total_1: float, total_n: float, n: int) -> str | None:
    """What is wrong with `fn(total_1, total_n, n)` as the scaling efficiency, or None. Names the
    slip (no division by n, the inverse, a percentage ...), never the value nor the formula."""
    try:
        got = fn(total_1, total_n, n)
    except Exception as exc:  # the student's code: its error is the verdict, not a traceback
        return f"my_efficiency raised {type(exc).__name__}: {exc}"
    mine = as_float(got)
    if mine is None:
        return f"my_efficiency returned {kind(got)}: return the efficiency as a number"
    want = weak_efficiency(total_n, total_1, n)
    close = lambda x: math.isclose(mine, x, rel_tol=1e-6)  # noqa: E731
    if close(want):
        return None
    if close(total_n / total_1):
        return ("that is the speedup, not the scaling efficiency: the efficiency compares the "
                "speedup with the number of workers (1.0 = every worker adds a full worker's rate)")
    if close(1 / want) or close(total_1 / total_n) or close(total_1 / total_n / n):
        return ("the ratio is upside down: swap what you divide by what (an efficiency is at "
                "most about 1.0)")
    if close(100 * want):
        return "that is a percentage: give the efficiency as a fraction (1.0 = perfect scaling)"
    if close(want / n):
        return "divided by the number of workers once too often"
    if close(total_n / n):
        return ("that is the rate per worker of the n-worker run, in img/s: compare it with one "
                "worker's rate")
    return ("not the scaling efficiency as defined above (1.0 when every worker adds a full "
            "worker's rate): re-read its definition and check which measured rates you compare")


def check_efficiency(fn, rows: list[dict]) -> bool:
    """Self-check of the notebook exercise: `fn(total_1, total_n, n)` returns the efficiency.
    Judged on the seed's reference, on cases it has not seen and on this run's rows (`rows`, a
    scaling table with a 1-worker run); prints one plain verdict line (a wrong one names the
    slip, never the value nor its formula) and returns True when every case is right."""
    base = min(rows, key=lambda r: r["workers"])
    if base["workers"] != 1:
        raise ValueError("the exercise needs a 1-worker run in the table (run the cells above)")
    cases = [("the seed's reference", SEED_1GPU_TOTAL, SEED_2GPU_TOTAL, 2)]
    cases += [("a case you have not seen", t1, tn, n) for t1, tn, n in UNSEEN]
    cases += [(r["run"], base["total_img_sec"], r["total_img_sec"], r["workers"]) for r in rows
              if r["engine"] == base["engine"] and r["workers"] > 1]
    for name, total_1, total_n, n in cases:
        problem = _efficiency_problem(fn, total_1, total_n, n)
        if problem:
            print(f"Not yet ({name}: {total_1:.1f} img/s on 1 worker, {total_n:.1f} on {n}): "
                  f"{problem}.")
            return False
    shown = "; ".join(f"{name}: {weak_efficiency(tn, t1, n):.3f}"
                      for name, t1, tn, n in cases[1 + len(UNSEEN):])
    seed = weak_efficiency(SEED_2GPU_TOTAL, SEED_1GPU_TOTAL, 2)
    print(f"Right on all {len(cases)} cases: the seed's reference gives an efficiency of "
          f"{seed:.3f}" + (f"; this run's {shown}" if shown else "") + ".")
    return True
