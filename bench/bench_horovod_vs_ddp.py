"""Horovod vs PyTorch DDP: img/s of the same model, batch and ranks on this machine, one run.

    .venv/bin/python bench/bench_horovod_vs_ddp.py                 # resnet50, 64x64, batch 16, 2 ranks
    .venv/bin/python bench/bench_horovod_vs_ddp.py --model resnet18 --image-size 32 --rounds 5

The two labs of course/labs/03_horovod (Horovod's DistributedOptimizer under horovodrun --gloo,
DDP under torchrun, gloo) do identical work: same model, same random batch, same timing code.
Runs are interleaved (H D D H H D ...) so slow drift of a shared machine hits both engines alike;
the figure is the ratio of the medians of total img/s (goal: within 10%, i.e. 0.90-1.10).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dltutor import env, hvdlab  # noqa: E402


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
    args = hvdlab.benchmark_args(a.model, a.batch_size, a.image_size, a.warmup,
                                 a.batches_per_iter, a.iters, no_cuda=env.backend() == "gloo")
    print(f"Horovod vs DDP: {a.model} {a.image_size}x{a.image_size}, batch {a.batch_size} per "
          f"worker, {a.nproc} workers, {env.hardware_label()}, synthetic data, {a.rounds} rounds")
    results = {"horovod": [], "ddp": []}
    start = time.monotonic()
    for r in range(a.rounds):
        order = ("horovod", "ddp") if r % 2 == 0 else ("ddp", "horovod")
        for engine in order:
            row = hvdlab.run_benchmark(engine, a.nproc, args, echo=False)
            results[engine].append(row["total_img_sec"])
            print(f"  round {r}  {engine:7s}  total {row['total_img_sec']:8.2f} img/s  "
                  f"({row['img_sec_per_worker']:.2f} per worker, "
                  f"{1000 * row['step_time_s']:.0f} ms/step, {row['threads']} thread(s)/rank)",
                  flush=True)
    hvd, ddp = statistics.median(results["horovod"]), statistics.median(results["ddp"])
    ratio = hvd / ddp
    print(f"median total img/s: horovod {hvd:.2f}, ddp {ddp:.2f}")
    print(f"RATIO horovod/ddp = {ratio:.3f}  ({'within' if abs(ratio - 1) <= 0.10 else 'OUTSIDE'}"
          f" the 10% goal; {time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
