# expect: wrong
# names: no process group was open
# why: rank and world size read from the environment, shards and one writer, but no group: nothing averaged
import os

import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from dltutor.ddp import exercise as ex

rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

data = ex.dataset()
model = ex.model()
optimizer = ex.optimizer(model.parameters())

sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
loader = DataLoader(data, batch_size=ex.PER_RANK_BATCH, sampler=sampler)

for epoch in range(ex.EPOCHS):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

if rank == 0:
    ex.save_checkpoint(model.state_dict())
ex.report(model)
