"""One backward pass of a small deterministic model; dump the engine-averaged gradients.

  horovodrun -np 2 -H localhost:2 --gloo python grad_check.py --engine horovod --out g_hvd.pt
  torchrun --nproc-per-node 2 grad_check.py --engine ddp --out g_ddp.pt

Every rank builds the same weights (seed 0) and its own batch (seed 100 + rank), runs one
forward/backward and lets the engine average the gradients (Horovod: DistributedOptimizer +
synchronize(); DDP: the reducer in backward()). Rank 0 saves {name: averaged grad} plus its own
local (un-averaged) gradients, so a test can check both that averaging happened and that the two
engines agree. `build_model` and `make_batch` are imported by the test for a one-process reference.
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, CLASSES = 8, 5


def build_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                         nn.Flatten(), nn.Linear(8 * 16, 32), nn.Tanh(), nn.Linear(32, CLASSES))


def make_batch(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(BATCH, 3, 12, 12, generator=g), torch.randint(0, CLASSES, (BATCH,), generator=g)


def local_grads(model, rank):
    x, y = make_batch(rank)
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def main():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--engine", choices=["horovod", "ddp"], required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    model = build_model()
    if a.engine == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        mine = local_grads(model, rank)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), op=hvd.Average)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        x, y = make_batch(rank)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()   # hooks start the all-reduces
        opt.synchronize()                        # wait; p.grad now holds the average
        averaged = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    else:
        import torch.distributed as tdist
        from torch.nn.parallel import DistributedDataParallel as DDP
        tdist.init_process_group("gloo")
        rank, size = tdist.get_rank(), tdist.get_world_size()
        mine = local_grads(model, rank)
        ddp = DDP(model)
        x, y = make_batch(rank)
        ddp.zero_grad()
        F.cross_entropy(ddp(x), y).backward()    # the reducer averages during backward
        averaged = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    if rank == 0:
        torch.save({"engine": a.engine, "world_size": size, "averaged": averaged, "local": mine},
                   a.out)
    print(f"GRAD_CHECK rank={rank} size={size} engine={a.engine} pid={os.getpid()}", flush=True)
    if a.engine == "ddp":
        tdist.destroy_process_group()


if __name__ == "__main__":
    main()
