"""A tiny lab-like script for the launcher tests.

  python tiny_lab.py                                  one process
  torchrun --nproc-per-node 2 tiny_lab.py             two ranks (gloo)
  python tiny_lab.py --mode crash --crash-rank 1      rank 1 dies while the others wait

Modes: ok (all_reduce and report), crash (one rank raises after init while the others block in
a collective), sigkill (the same, but the rank is SIGKILLed, as the OOM killer does), hang (one rank sleeps forever, --ignore-term: even through SIGTERM; the others finish).
"""
import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as tdist

from dltutor.core import dist

p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
p.add_argument("--mode", choices=["ok", "crash", "sigkill", "hang"], default="ok")
p.add_argument("--rank", type=int, default=1, help="the rank that crashes or hangs")
p.add_argument("--ignore-term", action="store_true", help="hanging ranks ignore SIGTERM")
p.add_argument("--marker", default=None, help="each rank touches <marker>.<rank> once running")
p.add_argument("--lines", type=int, default=2)
a = p.parse_args()

with dist.session() as ctx:
    dist.seed(0)
    dist.rank_print(f"hello world_size={ctx.world_size} threads={torch.get_num_threads()}")
    for i in range(a.lines):
        print(f"line {i} from rank {ctx.rank}", flush=True)
    if a.marker:
        open(f"{a.marker}.{ctx.rank}", "w").close()
    if a.mode in ("crash", "sigkill"):
        if ctx.is_distributed:
            tdist.barrier()  # everyone is up
        if ctx.rank == a.rank:
            time.sleep(0.5)
            print(f"CRASH_AT {time.time()}", flush=True)
            if a.mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"rank {ctx.rank} fails on purpose")
        if a.ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        tdist.all_reduce(torch.ones(1))  # blocks: the crashed rank never joins
    if a.mode == "hang" and ctx.rank == a.rank:
        if a.ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)
    t = torch.tensor([float(ctx.rank + 1)])
    if ctx.is_distributed and a.mode == "ok":
        tdist.all_reduce(t)
    print("stderr line", file=sys.stderr, flush=True)
    dist.report(total=t.item(), omp=os.environ.get("OMP_NUM_THREADS"),
                launcher=ctx.launcher, master_port=os.environ.get("MASTER_PORT"),
                master_addr=os.environ.get("MASTER_ADDR"))
