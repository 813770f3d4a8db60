"""One DeepSpeed rank for tests/test_engines.py: a few ZeRO-2 steps with DeepSpeedCPUAdam.

Launched as:
  torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port PORT tests/engines_ds_worker.py
with DS_ACCELERATOR=cpu (no GPU) and TORCH_EXTENSIONS_DIR pointing at the warmed op cache.
Prints one line `DS_RESULT {json}` per rank: losses, a parameter checksum, the optimizer class,
and whether this rank's parameters equal rank 0's (compared through an all-gather).
"""
import json
import os
import sys

import torch
import deepspeed
import deepspeed.comm as ds_dist

STEPS = 6
torch.set_num_threads(1)
deepspeed.init_distributed(dist_backend="gloo" if not torch.cuda.is_available() else "nccl")
rank, world = ds_dist.get_rank(), ds_dist.get_world_size()

torch.manual_seed(0)                                   # same initial model on every rank
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
g = torch.Generator().manual_seed(100 + rank)          # each rank its own data shard
x = torch.randn(16, 8, generator=g)
y = x.sum(dim=1, keepdim=True) * 0.5

config = {
    "train_micro_batch_size_per_gpu": 16,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "Adam", "params": {"lr": 0.02}},
    # ZeRO-2: gradients and optimizer states partitioned over the ranks; the optimizer states
    # live on the CPU (ZeRO-Offload), where DeepSpeed runs its C++ Adam (the cpu_adam op).
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "steps_per_print": 10**6,
}
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                               config=config)
device = engine.device
losses = []
for _ in range(STEPS):
    loss = torch.nn.functional.mse_loss(engine(x.to(device)), y.to(device))
    engine.backward(loss)
    engine.step()
    losses.append(loss.item())

flat = torch.cat([p.detach().float().flatten().cpu() for p in engine.module.parameters()])
everyone = [torch.zeros_like(flat) for _ in range(world)]
ds_dist.all_gather(everyone, flat)
same = all(torch.equal(everyone[0], other) for other in everyone)
basic = getattr(optimizer, "optimizer", optimizer)
# one write per line: two ranks share the launcher's stdout, and a write below PIPE_BUF is atomic
sys.stdout.write("DS_RESULT " + json.dumps({
    "rank": rank, "world": world, "losses": losses, "checksum": float(flat.double().sum()),
    "params_equal_rank0": same, "optimizer": type(basic).__name__,
    "zero_stage": engine.zero_optimization_stage(),
    "accelerator": os.environ.get("DS_ACCELERATOR")}) + "\n")
sys.stdout.flush()
ds_dist.barrier()  # every rank done before any tears down (see dltutor.core.dist.session)
ds_dist.destroy_process_group()
