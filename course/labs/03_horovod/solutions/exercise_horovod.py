"""Solution of notebook 03's exercise: the given single-process loop, with Horovod's five lines.

Hidden from the notebook; the self-check runs it with `check(solution=True)` and
tests/test_exercises.py proves the check passes on it and fails on broken copies of it.
Run by hand: horovodrun -np 2 -H localhost:2 --gloo python exercise_horovod.py
"""
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from dltutor.ddp import exercise as ex

hvd.init()                                            # Horovod: line 1, join the job
torch.set_num_threads(1)                              # Horovod: line 2, pin: one core each here
# (on a GPU node: torch.cuda.set_device(hvd.local_rank()), one GPU per worker)
data = ex.dataset()
model = ex.model()
optimizer = ex.optimizer(model.parameters())
optimizer = hvd.DistributedOptimizer(                 # Horovod: line 3, average the gradients
    optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)   # Horovod: line 4, rank 0's weights
hvd.broadcast_optimizer_state(optimizer, root_rank=0)       # Horovod: line 4, and its optimizer

sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())   # Horovod: line 5
loader = DataLoader(data, batch_size=ex.PER_RANK_BATCH, sampler=sampler, shuffle=sampler is None)

for epoch in range(ex.EPOCHS):
    sampler.set_epoch(epoch)                          # Horovod: line 5, a new shuffle each epoch
    for x, y in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

if hvd.rank() == 0:                                   # Horovod: line 5, one writer
    ex.save_checkpoint(model.state_dict())
ex.report(model)
