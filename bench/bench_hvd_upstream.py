"""Lab 03 against Horovod's own example: the same arguments, the same GPU, img/s side by side.

    python3 bench/bench_hvd_upstream.py --upstream PATH/pytorch_synthetic_benchmark.py --json out.json

PATH is Horovod's examples/pytorch/pytorch_synthetic_benchmark.py from the horovod repository (it is
not in the sdist, and the course does not ship it: give its path). Both scripts run as one
process each (Horovod with size 1, no launcher), alternately, `--repeats` times, with upstream's
defaults spelled out for both: ResNet-50, batch 32, 10 warm-up batches, 10 iterations of 10
batches. Each run's figure is the script's own "Img/sec per GPU: X" line. The ratio is lab /
upstream (goal >= 0.95), from the medians. The seed's figure (seed 001: 336.0 img/s on one V100,
ResNet-50, batch 64) is printed beside it as a reference, not measured here.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench_result import emit

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "course" / "labs" / "03_horovod" / "pytorch_synthetic_benchmark.py"
UPSTREAM_ARGS = ["--model", "resnet50", "--batch-size", "32", "--num-warmup-batches", "10",
                 "--num-batches-per-iter", "10", "--num-iters", "10"]
SEED_V100 = 336.0     # img/s, seed 001, 1 x V100, ResNet-50, batch 64 (quoted, not measured)
RATE = re.compile(r"Img/sec per (GPU|CPU): ([\d.]+) \+-([\d.]+)")


def one_run(script: Path, timeout: float) -> dict:
    """Run `script` with UPSTREAM_ARGS in one process; its img/s line, parsed."""
    cmd = [sys.executable, str(script)] + UPSTREAM_ARGS
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": path})
    m = RATE.search(proc.stdout)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"{script.name} failed (exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr)[-2000:]}")
    return dict(device=m.group(1), img_per_s=float(m.group(2)), conf=float(m.group(3)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--upstream", type=Path, required=True,
                    help="Horovod's examples/pytorch/pytorch_synthetic_benchmark.py")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each, alternating")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if not args.upstream.is_file():
        ap.error(f"--upstream {args.upstream}: no such file (Horovod's "
                 "examples/pytorch/pytorch_synthetic_benchmark.py)")
    runs = {"lab": [], "upstream": []}
    for _ in range(args.repeats):
        runs["lab"].append(one_run(LAB, args.timeout))
        runs["upstream"].append(one_run(args.upstream, args.timeout))
    lab = statistics.median(r["img_per_s"] for r in runs["lab"])
    up = statistics.median(r["img_per_s"] for r in runs["upstream"])
    import torch
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    out = dict(bench="hvd_upstream", device=device, args=UPSTREAM_ARGS, runs=runs,
               lab_img_per_s=lab, upstream_img_per_s=up, ratio=round(lab / up, 4),
               goal=0.95, seed_v100_img_per_s=SEED_V100)
    print(f"{device}, {' '.join(UPSTREAM_ARGS)}: lab 03 {lab:.1f} img/s, Horovod's example "
          f"{up:.1f} img/s, ratio {lab / up:.3f} (goal >= 0.95; medians of {args.repeats} runs each)")
    print(f"reference, not measured here: seed 001, 1 x V100, ResNet-50 batch 64: {SEED_V100} img/s")
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
