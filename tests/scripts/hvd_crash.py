"""A Horovod job in which one rank dies while the others wait in an all-reduce.

  horovodrun -np 2 -H localhost:2 --gloo python hvd_crash.py --crash-rank 1 --pid-dir DIR

Every rank writes DIR/<rank>.pid once Horovod is up (so a test can check none survives), joins
one all-reduce, then rank --crash-rank raises and the others block in a second all-reduce.
"""
import argparse
import os
import time

import torch

import horovod.torch as hvd

p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
p.add_argument("--crash-rank", type=int, default=1)
p.add_argument("--pid-dir", required=True)
a = p.parse_args()

hvd.init()
with open(os.path.join(a.pid_dir, f"{hvd.rank()}.pid"), "w") as fh:
    fh.write(str(os.getpid()))
hvd.allreduce(torch.ones(1), name="everyone_is_up")
print(f"rank {hvd.rank()} of {hvd.size()} is up", flush=True)
if hvd.rank() == a.crash_rank:
    time.sleep(0.5)
    raise RuntimeError(f"rank {hvd.rank()} fails on purpose")
hvd.allreduce(torch.ones(1), name="never_completes")  # blocks: the dead rank never joins
print("unreachable: the all-reduce completed without the dead rank", flush=True)
