# expect: solved
# why: a sampler of one's own: one permutation per epoch (seeded by the epoch), each rank its slice
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Sampler

from dltutor.ddp import exercise as ex


class EpochShard(Sampler):
    def __init__(self, n, rank, world_size):
        self.n, self.rank, self.world_size, self.epoch = n, rank, world_size, 0

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(100 + self.epoch))
        return iter(order[self.rank::self.world_size].tolist())

    def __len__(self):
        return len(range(self.rank, self.n, self.world_size))


dist.init_process_group(backend="gloo")
rank = dist.get_rank()
world_size = dist.get_world_size()

data = ex.dataset()
net = DistributedDataParallel(ex.model())
opt = ex.optimizer(net.parameters())
shard = EpochShard(len(data), rank, world_size)
loader = DataLoader(data, batch_size=ex.PER_RANK_BATCH, sampler=shard)

for epoch in range(ex.EPOCHS):
    shard.epoch = epoch
    for inputs, labels in loader:
        opt.zero_grad()
        loss = F.cross_entropy(net(inputs), labels)
        loss.backward()
        opt.step()

if dist.get_rank() == 0:
    ex.save_checkpoint(net.module.state_dict())
dist.destroy_process_group()
ex.report(net)
