"""A rank that never imports torch, for fast launcher fault tests (busy port, hang, crash).

  torchrun --nproc-per-node 2 light_rank.py --mode hang --rank 1

Modes: ok (print and report), crash (--rank raises; the others sleep, with --ignore-term even
through SIGTERM), hang (--rank sleeps forever; the others finish), sleep (every rank sleeps),
abort-at-exit (every rank reports; then --rank dies as gloo's teardown race kills it, the C++
runtime's last line and SIGABRT, while the others wait to be stopped), abort-early (--rank does
that before reporting).
"""
import argparse
import os
import signal
import sys
import time

from dltutor.core import dist

p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
p.add_argument("--mode", choices=["ok", "crash", "hang", "sleep", "abort-at-exit", "abort-early"], default="ok")
p.add_argument("--rank", type=int, default=1, help="the rank that crashes or hangs")
p.add_argument("--ignore-term", action="store_true", help="sleeping ranks ignore SIGTERM")
p.add_argument("--marker", default=None,
               help="each rank touches <marker>.<rank> once running, <marker>.<rank>.done when it ends")
a = p.parse_args()

info = dist.detect()
rank = info["rank"]
dist.rank_print("up")
for i in range(2):
    print(f"line {i} from rank {rank}", flush=True)
if a.marker:
    open(f"{a.marker}.{rank}", "w").close()
if a.mode == "crash" and rank == a.rank:
    time.sleep(0.5)
    print(f"CRASH_AT {time.time()}", flush=True)
    raise RuntimeError(f"rank {rank} fails on purpose")
survivor = a.mode == "crash" and rank != a.rank
if survivor or (a.mode == "hang" and rank == a.rank) or a.mode == "sleep":
    if a.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)


def abort_like_the_cxx_runtime():
    print("terminate called without an active exception", file=sys.stderr, flush=True)
    os.abort()


if a.mode == "abort-early" and rank == a.rank:
    abort_like_the_cxx_runtime()
dist.report(launcher=info["launcher"], master_port=os.environ.get("MASTER_PORT"),
            omp=os.environ.get("OMP_NUM_THREADS"))
if a.mode == "abort-at-exit":
    if rank == a.rank:
        time.sleep(0.5)
        abort_like_the_cxx_runtime()
    while True:
        time.sleep(1)
if a.marker:   # this rank is done: <marker>.<rank>.done, then gone at once (no teardown)
    open(f"{a.marker}.{rank}.done", "w").close()
    sys.stdout.flush()
    os._exit(0)
