# expect: wrong
# names: read by no rank \(samples? \d+.*n // world_size = \d+ samples: the remainder of \d+ / 2 was dropped
# why: shards by hand, n // world_size samples each from one shuffled order: the remainder of an uneven size is never read
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from dltutor.ddp import exercise as ex

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()

data = ex.dataset()
model = DDP(ex.model())
optimizer = ex.optimizer(model.parameters())
per_rank = len(data) // world_size

for epoch in range(ex.EPOCHS):
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(epoch)).tolist()
    mine = order[rank * per_rank:(rank + 1) * per_rank]
    for x, y in DataLoader(data, batch_size=ex.PER_RANK_BATCH, sampler=mine):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

if rank == 0:
    ex.save_checkpoint(model.module.state_dict())
dist.destroy_process_group()
ex.report(model)
