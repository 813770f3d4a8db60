# expect: solved
# why: no DistributedOptimizer: each gradient averaged with hvd.allreduce (op Average) by hand
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from dltutor.ddp import exercise as ex

hvd.init()
torch.set_num_threads(1)

data = ex.dataset()
model = ex.model()
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = ex.optimizer(model.parameters())

sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())
loader = DataLoader(data, batch_size=ex.PER_RANK_BATCH, sampler=sampler)

for epoch in range(ex.EPOCHS):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        for name, p in model.named_parameters():
            p.grad.copy_(hvd.allreduce(p.grad, name=name))
        optimizer.step()

if hvd.rank() == 0:
    ex.save_checkpoint(model.state_dict())
hvd.shutdown()
ex.report(model)
