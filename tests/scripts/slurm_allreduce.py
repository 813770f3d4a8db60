"""A tiny torch.distributed job for the Slurm tests: all_reduce one tensor, report the sum.

  srun --ntasks 2 python slurm_allreduce.py                 two ranks from SLURM_* variables
  torchrun --nproc-per-node 2 slurm_allreduce.py            the same under torchrun
  srun --ntasks 2 python slurm_allreduce.py --fail-rank 1   rank 1 exits with --exit-code
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as tdist

from dltutor.core import dist

p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
p.add_argument("--fail-rank", type=int, default=None, help="this rank exits before the all_reduce")
p.add_argument("--exit-code", type=int, default=3)
a = p.parse_args()

with dist.session(timeout=60) as ctx:
    if ctx.rank == a.fail_rank:
        print(f"rank {ctx.rank} fails on purpose", flush=True)
        sys.exit(a.exit_code)
    t = torch.tensor([float(ctx.rank + 1)])
    if ctx.is_distributed:
        tdist.all_reduce(t)   # DDP: the collective every data-parallel step relies on
    dist.report(total=t.item(), launcher=ctx.launcher, host=socket.gethostname(),
                local_rank=ctx.local_rank, job=os.environ.get("SLURM_JOB_ID"))
