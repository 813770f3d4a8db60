"""Cell to result: one tiny 2-rank DDP job started four ways, side by side, alternated.

    .venv/bin/python bench/bench_launch.py               # 2 ranks, 5 rounds (make bench installs accelerate)
    .venv/bin/python bench/bench_launch.py --rounds 9

The job is bench/launch_job.py: 30 steps of a Linear(32, 32) under DDP on gloo, one thread per
rank. Each way is timed from the call until the job's results are back in this process (as a
notebook cell waits for them):
  * warm:        dltutor.launch.run.launch(job, 2): ranks forked from the warm start server;
  * fork:        two os.fork()s of this process (torch already imported), each running the
                 script as __main__: the floor for any launcher that starts ranks by fork;
  * accelerate:  accelerate's notebook_launcher(train, num_processes=2) (forks this process);
  * torchrun:    dltutor.launch.run.launch(job, 2, backend="torchrun").
Before timing, this process imports what the warm server preloads (warm_server.PRELOAD: torch,
torch.distributed, DDP's lazily imported modules, torchvision, ...), so fork and accelerate fork
from a process as warm as the server: the ratios compare launchers, not imports. Rounds rotate
the order so drift on a shared machine hits every way alike; the first warm launch (it starts the
server, importing torch once per kernel) is timed apart and not in the medians.
Figures: median warm / fork and warm / accelerate (goal <= 1.5 each), and warm / torchrun.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402

from dltutor.core import env  # noqa: E402
from dltutor.core.device import hardware_label  # noqa: E402
from dltutor.core.dist import free_port, read_report  # noqa: E402
from dltutor.launch.run import launch  # noqa: E402

JOB = ROOT / "bench" / "launch_job.py"
sys.path.insert(0, str(JOB.parent))
import launch_job  # noqa: E402


def via_launch(backend: str) -> list:
    res = launch(JOB, nproc=2, threads=1, timeout=300, echo=False, backend=backend)
    return res.metric("losses")


def via_fork(nproc: int = 2) -> list:
    """Fork this process once per rank; each runs the job script as __main__."""
    import runpy
    assert threading.active_count() == 1, "fork from a process with threads"
    port, pids, outs = free_port(), [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rank in range(nproc):
            out = Path(tmp) / f"rank{rank}.out"
            outs.append(out)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    fd = os.open(out, os.O_WRONLY | os.O_CREAT)
                    os.dup2(fd, 1)
                    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
                    sys.argv = [str(JOB)]
                    runpy.run_path(str(JOB), run_name="__main__")
                    code = 0
                finally:
                    sys.stdout.flush()
                    os._exit(code)
            pids.append(pid)
        codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        assert codes == [0] * nproc, f"fork launch failed: exit codes {codes}"
        reports = [read_report(line) for out in outs for line in out.read_text().splitlines()]
    return [r["losses"] for r in reports if r]


def via_accelerate(nproc: int = 2) -> list:
    from accelerate import notebook_launcher
    notebook_launcher(launch_job.train, num_processes=nproc, use_port=str(free_port()))
    return []   # notebook_launcher returns nothing: the job has finished on every rank


WAYS = {"warm": lambda: via_launch("local"), "fork": via_fork, "accelerate": via_accelerate,
        "torchrun": lambda: via_launch("torchrun")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    import importlib
    from dltutor.launch.warm_server import PRELOAD
    for name in PRELOAD:
        importlib.import_module(name)
    torch.set_num_threads(1)
    import accelerate
    print(f"cell to result, {launch_job.STEPS} steps of Linear(32, 32), DDP on gloo, 2 ranks, "
          f"{hardware_label()}, {env.cpu_cores()} cores, accelerate {accelerate.__version__}, "
          f"torch {torch.__version__}, {a.rounds} rounds")
    t0 = time.perf_counter()
    first = via_launch("local")
    print(f"  first warm launch in this process (starts the server): "
          f"{time.perf_counter() - t0:.2f} s", flush=True)
    times, losses = {k: [] for k in WAYS}, {}
    names = list(WAYS)
    for r in range(a.rounds):
        for name in names[r % 4:] + names[:r % 4]:
            t = time.perf_counter()
            out = WAYS[name]()
            times[name].append(time.perf_counter() - t)
            losses.setdefault(name, out)
        print("  round %d: %s" % (r + 1, ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items())),
              flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print("median: " + ", ".join(f"{k} {v:.2f} s" for k, v in med.items()))
    same = first == losses["warm"] == losses["torchrun"] == losses["fork"]
    print(f"losses: warm, fork and torchrun runs {'agree bit for bit' if same else 'DIFFER'} "
          f"(rank 0 last loss {first[0][-1]:.6f})")
    for other in ("fork", "accelerate", "torchrun"):
        goal = "  (goal <= 1.5)" if other != "torchrun" else ""
        print(f"RATIO warm/{other} = {med['warm'] / med[other]:.2f}{goal}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
