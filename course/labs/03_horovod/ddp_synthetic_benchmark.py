"""Synthetic-data training throughput of a torchvision model with PyTorch DDP.

The twin of `pytorch_synthetic_benchmark.py` (Horovod): same flags, model, random batch, timing
and printed lines (all in `dltutor.horovod.benchmark`); only the engine that averages the gradients
differs. Lines marked `# DDP:` are the whole difference from single-process training.

Launch forms (run in this lab's folder):
  python ddp_synthetic_benchmark.py --tiny                          # one process, no group
  torchrun --nproc-per-node 2 ddp_synthetic_benchmark.py \\
      --no-cuda --image-size 32 --batch-size 8 --tiny               # 2 workers on this CPU (gloo)
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
      --rdzv-endpoint node1:29500 ddp_synthetic_benchmark.py         # 4 GPUs x 2 nodes (nccl)
  srun --ntasks 8 --ntasks-per-node 4 python ddp_synthetic_benchmark.py   # in a Slurm job
  mpirun -np 8 -x MASTER_ADDR=node1 python ddp_synthetic_benchmark.py   # Open MPI / PBS
With mpirun the ranks come from the MPI environment (on one node MASTER_ADDR may be left out).
From a notebook: dltutor.launch.run.launch(this_file, nproc=2, backend="local", args=[...]).

--use-adasum has no DDP counterpart and is refused; --fp16-allreduce uses DDP's fp16
compression hook (Horovod's Compression.fp16 does the same).
"""
import torch
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP  # DDP:

from dltutor.horovod import benchmark
from dltutor.core import dist

args = benchmark.parse_args(__doc__)
if args.use_adasum:
    raise SystemExit("--use-adasum is a Horovod reduction; DDP only averages (drop the flag)")

ctx = dist.init(use_cuda=not args.no_cuda)  # DDP: join the process group (torchrun/Slurm/PBS)
device = ctx.device  # DDP: one GPU per local rank with nccl; --no-cuda: the CPU with gloo
info = dist.detect()
torch.set_num_threads(benchmark.threads_for(args, info["local_world_size"]))  # DDP: cores/worker

model = benchmark.build_model(args.model, args.num_classes, args.seed).to(device)
if ctx.is_distributed:
    # DDP: wrap; DDP broadcasts rank 0's weights and all-reduces gradients in backward()
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)  # DDP:
    if args.fp16_allreduce:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # DDP:
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)  # DDP:

optimizer = optim.SGD(model.parameters(), lr=0.01 * ctx.world_size)  # DDP: scale lr by workers

data, target = benchmark.synthetic_batch(args.batch_size, args.image_size, args.num_classes,
                                         args.seed + ctx.rank, device)  # DDP: own batch

try:
    benchmark.run(args, model, optimizer, data, target, device,
                  rank=ctx.rank, world_size=ctx.world_size, engine="ddp")
finally:
    dist.teardown()  # DDP: leave the process group
