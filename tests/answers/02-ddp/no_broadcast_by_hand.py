# expect: wrong
# names: kept their different random starting weights
# why: gradients averaged by hand, but the ranks never share their starting weights
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from dltutor.ddp import exercise as ex

dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()

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
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world_size
        optimizer.step()

if rank == 0:
    ex.save_checkpoint(model.state_dict())
dist.destroy_process_group()
ex.report(model)
