"""The tiny DDP job every launcher in bench_launch.py runs: 30 steps of a Linear(32, 32) on gloo.

    torchrun --nproc-per-node 2 bench/launch_job.py [STEPS]
    python -c "from dltutor.launch.run import launch; launch('bench/launch_job.py', 2)"

As a script it reports its losses with `dltutor.core.dist.report(losses=[...])`; `train()` is the
same work as a function (what accelerate's notebook_launcher takes). Every launcher gives the ranks
torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), read by init_process_group.
tests/test_warm.py runs it under the warm start and under torchrun and wants the same losses.
"""
import sys

import torch
import torch.distributed as tdist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 30


def train(steps: int = STEPS) -> list[float]:
    tdist.init_process_group("gloo")                   # DDP: env:// rendezvous
    rank = tdist.get_rank()
    torch.manual_seed(0)                               # the same initial weights on every rank
    model = DDP(torch.nn.Linear(32, 32))               # DDP: gradients averaged in backward
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1 + rank)     # each rank its own batches
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 32, generator=data)
        loss = (model(x) - x.flip(1)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    tdist.barrier()
    tdist.destroy_process_group()
    return losses


if __name__ == "__main__":
    from dltutor.core import dist
    dist.report(losses=train(int(sys.argv[1]) if len(sys.argv) > 1 else STEPS))
