"""2-rank weak-scaling efficiency of lab 02 on this machine, 1 thread per rank.

    .venv/bin/python bench/bench_ddp_scaling.py                      # width 8, b=32, 30 steps, 3 rounds
    .venv/bin/python bench/bench_ddp_scaling.py --width 16 --steps 60 --rounds 5

Weak scaling keeps the per-rank batch b: 1 rank trains on b images per step (plain
`python train.py`, no process group), 2 ranks on 2b (torchrun, DDP over gloo or nccl). Each rank
gets one thread (OMP_NUM_THREADS=1), so 2 ranks use 2 cores. Efficiency
E = P_2 / (P_1 x 2) with P = global images/s (first 2 steps left out), from the medians over
alternating rounds (1 2 2 1 1 2 ...). 1.0 = every added rank adds a full rank's throughput.
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dltutor.core import env  # noqa: E402
from dltutor.core.device import hardware_label  # noqa: E402
from dltutor.launch.run import launch  # noqa: E402
from dltutor.ddp.scaling import speedup, weak_efficiency  # noqa: E402

LAB = ROOT / "course" / "labs" / "02_ddp" / "train.py"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--per-rank-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    a = p.parse_args(argv)
    args = ["--width", a.width, "--per-rank-batch", a.per_rank_batch, "--steps", a.steps,
            "--train-subset", a.per_rank_batch * a.nproc * (a.steps + 1), "--warmup-steps", 0,
            "--log-every", 1000, "--weak"]
    print(f"weak scaling, lab 02: ResNet width {a.width}, b={a.per_rank_batch} per rank, "
          f"{a.steps} steps, 1 thread per rank, {hardware_label()}, {env.cpu_cores()} cores")
    rates = {1: [], a.nproc: []}
    data = None
    for r in range(a.rounds):
        for n in ((1, a.nproc) if r % 2 == 0 else (a.nproc, 1)):
            res = launch(LAB, nproc=n, args=args, threads=1, timeout=900, echo=False,
                         backend="python" if n == 1 else "local")
            m = res.metrics[0]
            data = m["data"]
            rates[n].append(m["global_img_per_s"])
            print(f"  round {r + 1}: {n} rank(s) {m['global_img_per_s']:8.1f} img/s "
                  f"(step {m['step_time_ms']:.1f} ms)", flush=True)
    p1, pn = statistics.median(rates[1]), statistics.median(rates[a.nproc])
    print(f"median global img/s: 1 rank {p1:.1f}, {a.nproc} ranks {pn:.1f} (data {data})")
    print(f"SPEEDUP {speedup(pn, p1):.3f}; WEAK-SCALING EFFICIENCY "
          f"{weak_efficiency(pn, p1, a.nproc):.3f} ({hardware_label()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
