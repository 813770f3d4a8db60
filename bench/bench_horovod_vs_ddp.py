"""Horovod vs PyTorch DDP: img/s of the same model, batch and ranks on this machine, one run.

    .venv/bin/python bench/bench_horovod_vs_ddp.py                 # resnet50, 64x64, batch 16, 2 ranks
    .venv/bin/python bench/bench_horovod_vs_ddp.py --model resnet18 --image-size 32 --rounds 5

The two labs of course/labs/03_horovod (Horovod's DistributedOptimizer under horovodrun --gloo,
DDP under torchrun, gloo) do identical work: same model, same random batch, same timing code.
Horovod runs twice per round: with the lab's CPU settings (HOROVOD_CYCLE_TIME=50 ms, fusion
32 MiB, dltutor.horovod.benchmark.HOROVOD_CPU_SETTINGS) and with Horovod's own defaults (1 ms, 128 MiB).
Runs are interleaved, the order rotating each round, so slow drift of a shared machine hits all
three alike; the figures are ratios of the medians of total img/s (goal: within 10% of DDP).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dltutor.core.units import MiB  # noqa: E402
from dltutor.horovod import benchmark
from dltutor.core.device import backend, hardware_label  # noqa: E402
from dltutor.horovod import runs  # noqa: E402

RUNS = {"horovod": ("horovod", None),                                   # the lab's CPU settings
        "horovod-defaults": ("horovod", benchmark.HOROVOD_DEFAULTS),    # Horovod's own defaults
        "ddp": ("ddp", None)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3, help="runs per engine, interleaved")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batches-per-iter", type=int, default=3)
    p.add_argument("--iters", type=int, default=4)
    a = p.parse_args(argv)
    args = runs.benchmark_args(a.model, a.batch_size, a.image_size, a.warmup,
                                 a.batches_per_iter, a.iters, no_cuda=backend() == "gloo")
    print(f"Horovod vs DDP: {a.model} {a.image_size}x{a.image_size}, batch {a.batch_size} per "
          f"worker, {a.nproc} workers, {hardware_label()}, synthetic data, {a.rounds} rounds")
    names = list(RUNS)
    results = {name: [] for name in names}
    start = time.monotonic()
    for r in range(a.rounds):
        for name in names[r % 3:] + names[:r % 3]:
            engine, extra_env = RUNS[name]
            row = runs.run_benchmark(engine, a.nproc, args, env=extra_env, echo=False)
            results[name].append(row["total_img_sec"])
            knobs = (f", cycle {row['cycle_time_ms']:g} ms, fusion "
                     f"{row['fusion_threshold_bytes'] / MiB:g} MiB" if engine == "horovod" else "")
            print(f"  round {r}  {name:16s}  total {row['total_img_sec']:8.2f} img/s  "
                  f"({row['img_sec_per_worker']:.2f} per worker, {1000 * row['step_time_s']:.0f} "
                  f"ms/step, {row['threads']} thread(s)/rank{knobs})", flush=True)
    med = {name: statistics.median(v) for name, v in results.items()}
    print("median total img/s: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    for name in ("horovod", "horovod-defaults"):
        ratio = med[name] / med["ddp"]
        print(f"RATIO {name}/ddp = {ratio:.3f}  "
              f"({'within' if abs(ratio - 1) <= 0.10 else 'OUTSIDE'} the 10% goal)")
    print(f"({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
