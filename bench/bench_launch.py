"""Launch overhead: from the call to rank 0's first training step, dltutor.launch.run vs plain torchrun.

    .venv/bin/python bench/bench_launch.py                 # 2 ranks, 3 rounds, lab 02 --tiny
    .venv/bin/python bench/bench_launch.py --nproc 2 --rounds 5

Both sides start the same lab (course/labs/02_ddp/train.py --tiny --steps 2) with the same
torchrun arguments and 1 thread per rank. The lab reports `t_first_step`, the wall-clock time its
first training step began on each rank. Overhead = t_first_step(rank 0) - the time of the call:
  * launch:   `dltutor.launch.run.launch(...)` from this process (as a notebook cell does);
  * torchrun: `python -m torch.distributed.run ...` started with subprocess, output to a file.
Runs alternate (L T T L L T ...) so drift on a shared machine hits both alike. The figure is the
ratio of the median overheads (launch / torchrun); 1.0 = the launcher adds nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dltutor.core import env  # noqa: E402
from dltutor.core.device import hardware_label  # noqa: E402
from dltutor.core.dist import free_port  # noqa: E402
from dltutor.launch.run import launch  # noqa: E402

LAB = ROOT / "course" / "labs" / "02_ddp" / "train.py"
ARGS = ["--tiny", "--steps", "2", "--log-every", "1000"]


def via_launch(nproc: int) -> float:
    t_call = time.time()
    res = launch(LAB, nproc=nproc, args=ARGS, threads=1, timeout=300, echo=False)
    return res.metrics[0]["t_first_step"] - t_call


def via_torchrun(nproc: int) -> float:
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.txt"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
               str(nproc), "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               "--max-restarts", "0", str(LAB), *ARGS]
        t_call = time.time()
        with open(out, "w") as fh:
            subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=environ, timeout=300,
                           check=True)
        records = [json.loads(line.split(" ", 1)[1]) for line in out.read_text().splitlines()
                   if line.startswith("DLTUTOR_METRICS ")]
    rank0 = min(records, key=lambda r: r["rank"])
    return rank0["t_first_step"] - t_call


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    print(f"launch overhead to rank 0's first step: lab 02 {' '.join(ARGS)}, {a.nproc} ranks, "
          f"{hardware_label()}, {env.cpu_cores()} cores, {a.rounds} rounds")
    times = {"launch": [], "torchrun": []}
    for r in range(a.rounds):
        order = ("launch", "torchrun") if r % 2 == 0 else ("torchrun", "launch")
        for name in order:
            t = via_launch(a.nproc) if name == "launch" else via_torchrun(a.nproc)
            times[name].append(t)
            print(f"  round {r + 1}: {name:8s} {t:6.2f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"median: dltutor.launch.run {med['launch']:.2f} s, torchrun {med['torchrun']:.2f} s")
    print(f"RATIO launch/torchrun = {med['launch'] / med['torchrun']:.3f}  "
          f"(extra {med['launch'] - med['torchrun']:+.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
