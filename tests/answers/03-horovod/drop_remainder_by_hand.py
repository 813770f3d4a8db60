# expect: wrong
# names: read by no rank \(samples? \d+.*n // world_size = \d+ samples: the remainder of \d+ / 2 was dropped
# why: shards by hand, len(data) // hvd.size() samples each: the remainder of an uneven size is never read
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from dltutor.ddp import exercise as ex

hvd.init()
torch.set_num_threads(1)

data = ex.dataset()
model = ex.model()
optimizer = hvd.DistributedOptimizer(ex.optimizer(model.parameters()),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
per_worker = len(data) // hvd.size()

for epoch in range(ex.EPOCHS):
    order = torch.randperm(len(data), generator=torch.Generator().manual_seed(epoch)).tolist()
    mine = order[hvd.rank() * per_worker:(hvd.rank() + 1) * per_worker]
    for x, y in DataLoader(data, batch_size=ex.PER_RANK_BATCH, sampler=mine):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

if hvd.rank() == 0:
    ex.save_checkpoint(model.state_dict())
ex.report(model)
