"""Worker for tests/test_ddp.py: k SGD steps of a small BN-free net on fixed data, params saved.

  python ddp_equiv_worker.py --out DIR                        reference: 1 process, global batch
  torchrun --nproc-per-node 2 ddp_equiv_worker.py --out DIR   each rank takes its 1/W slice

Modes (all run in one launch, each from the same initial weights):
  ddp     DistributedDataParallel, small buckets (several all-reduces overlapping backward)
  manual  DDP under no_sync() + dltutor.ddp.by_hand.allreduce_gradients after backward (--no-overlap)
  none    no gradient averaging at all: the negative control, ranks must drift apart
Files: <out>/<mode>.rank<r>.pt holding the state dict after the last step.
"""
import argparse
import contextlib
import os

import torch
from torch import nn

MODES = ("ddp", "manual", "none")


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 16),
                         nn.Tanh(), nn.Linear(16, 10))


def fixed_data(steps, global_batch):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(steps, global_batch, 3, 8, 8, generator=g),
            torch.randint(0, 10, (steps, global_batch), generator=g))


def train(mode, rank, world, steps, global_batch, lr=0.1):
    """Run `steps` steps on this rank's slice of each fixed global batch; return the model."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dltutor.ddp.by_hand import allreduce_gradients

    x, y = fixed_data(steps, global_batch)
    b = global_batch // world
    model = make_model()
    if world > 1 and mode in ("ddp", "manual"):
        model = DDP(model, bucket_cap_mb=0.001)  # ~1 KB buckets: several buckets, real overlap
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    sync_off = model.no_sync if mode == "manual" and world > 1 else contextlib.nullcontext
    for k in range(steps):
        xb, yb = x[k, rank * b:(rank + 1) * b], y[k, rank * b:(rank + 1) * b]
        opt.zero_grad()
        with sync_off():
            nn.functional.cross_entropy(model(xb), yb).backward()
        if mode == "manual" and world > 1:
            allreduce_gradients(model.parameters(), world)
        opt.step()
    return model.module if hasattr(model, "module") else model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--modes", default=",".join(MODES))
    a = p.parse_args()
    from dltutor.core import dist
    with dist.session() as ctx:
        for mode in a.modes.split(","):
            model = train(mode, ctx.rank, ctx.world_size, a.steps, a.global_batch)
            torch.save(model.state_dict(), os.path.join(a.out, f"{mode}.rank{ctx.rank}.pt"))
        dist.report(done=True, modes=a.modes)


if __name__ == "__main__":
    main()
