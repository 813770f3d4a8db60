"""Solution of notebook 02's exercise: the given single-process loop, made data-parallel with DDP.

Hidden from the notebook; the self-check runs it with `check(solution=True)` and
tests/test_exercises.py proves the check passes on it and fails on broken copies of it.
Run by hand: torchrun --nproc-per-node 2 exercise_ddp.py
"""
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from dltutor.ddp import exercise as ex

dist.init_process_group("gloo")                       # DDP: TODO 1, join the group
rank, world_size = dist.get_rank(), dist.get_world_size()   # DDP: TODO 1

data = ex.dataset()
model = ex.model()
model = DDP(model)                                    # DDP: TODO 4, copies rank 0's weights
optimizer = ex.optimizer(model.parameters())

sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)   # DDP: TODO 2
loader = DataLoader(data, batch_size=ex.PER_RANK_BATCH, sampler=sampler, shuffle=sampler is None)

for epoch in range(ex.EPOCHS):
    sampler.set_epoch(epoch)                          # DDP: TODO 3
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

if rank == 0:                                         # DDP: TODO 5
    ex.save_checkpoint(model.module.state_dict())     # DDP: TODO 5, the model inside DDP

dist.destroy_process_group()                          # DDP: TODO 6
ex.report(model)
