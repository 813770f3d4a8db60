"""A rank that dies on its first attempts, for the restart tests (dltutor.launch.restart).

  python restart_rank.py --fail-attempts 1 --rank 1    rank 1 SIGKILLs itself on attempt 0 only

Every rank joins the gloo group and all-reduces once; on the attempts before --fail-attempts
(dltutor.checkpoint.restarts.restart_count(): 0 on the first) rank --rank prints a line and
SIGKILLs itself after that all-reduce, while the others wait in a second one. Each rank reports
its attempt and pid.
"""
import argparse
import os
import signal
import time

import torch
import torch.distributed as tdist

from dltutor.checkpoint.restarts import restart_count
from dltutor.core import dist

p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
p.add_argument("--rank", type=int, default=1, help="the rank that dies")
p.add_argument("--fail-attempts", type=int, default=1, help="it dies on attempts 0..N-1")
a = p.parse_args()

with dist.session() as ctx:
    attempt = restart_count()
    print(f"attempt {attempt} rank {ctx.rank} pid {os.getpid()}", flush=True)
    t = torch.ones(1)
    tdist.all_reduce(t)
    if ctx.rank == a.rank and attempt < a.fail_attempts:
        time.sleep(0.2)
        print(f"rank {ctx.rank} dies on attempt {attempt}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    tdist.all_reduce(t)
    dist.report(attempt=attempt, pid=os.getpid(), total=t.item())
