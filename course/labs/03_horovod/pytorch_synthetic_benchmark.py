"""Synthetic-data training throughput of a torchvision model with Horovod (PyTorch).

Every worker trains on one random batch that never leaves memory, so the numbers measure the
model's compute plus Horovod's gradient all-reduce, and nothing of disks or data loading.
Lines marked `# Horovod:` are the whole difference from single-process training.

Launch forms (run in this lab's folder; the script is the same in all of them):
  python pytorch_synthetic_benchmark.py --tiny                      # one process, no launcher
  horovodrun -np 2 -H localhost:2 --gloo python pytorch_synthetic_benchmark.py \\
      --no-cuda --image-size 32 --batch-size 8 --tiny               # 2 workers on this CPU (Gloo)
  horovodrun -np 8 -H node1:4,node2:4 python pytorch_synthetic_benchmark.py   # 4 GPUs x 2 nodes
  srun --ntasks 8 --ntasks-per-node 4 python pytorch_synthetic_benchmark.py   # MPI builds only
  mpirun -np 8 -H node1:4,node2:4 -bind-to none -map-by slot \\
      python pytorch_synthetic_benchmark.py                         # where Horovod has MPI
In a Slurm or PBS job, the script that print(dltutor.launch.sites.render_job(site, this_file,
nodes=2, tasks_per_node=K)) gives (horovodrun is this lab's launcher at every site) runs horovodrun
on the first node with -H node1:K,node2:K from the job's node list ($PBS_NODEFILE under PBS);
horovodrun starts every rank over ssh
(course/labs/slurm/launchers.toml says how it tells local from remote hosts and why the script
names the network interface). On the course's test
cluster, 2 nodes x 1 rank prints "ranks on hosts: node1 [0], node2 [1]" and gives the losses of
1 node x 2 ranks (tests/test_multinode_engines.py); 2 nodes x 2 ranks gives 1 node x 4 ranks'
losses bit for bit with HOROVOD_FUSION_THRESHOLD=0 exported (with fusion, the order of each
4-rank sum changes from run to run and the losses drift apart).
srun works only for a Horovod built with MPI (it reads its ranks from MPI; Slurm's PMI must match
that MPI). The course's Horovod 0.28.1 is built with Gloo alone: Gloo finds its peers only through
horovodrun's rendezvous server and HOROVOD_* variables, which srun does not provide, so every srun
task would train alone in a world of one ("Number of CPUs: 1" on each node, and the job COMPLETED).
The lab stops such a run at once with an error that says so (dltutor.horovod.world). From a
notebook: dltutor.launch.run.launch(this_file, nproc=2, backend="horovod", args=[...]).
Rank 0 prints which rank ran on which host ("ranks on hosts: ...").

On CPU workers the lab sets HOROVOD_CYCLE_TIME=50 (ms) and HOROVOD_FUSION_THRESHOLD=32 MiB unless
the environment sets them (Horovod's defaults, 1 ms and 128 MiB, suit GPUs; on CPUs the 1 ms cycle
takes time from the compute: bench/bench_horovod_vs_ddp.py measures both). Rank 0 prints the values.

The twin `ddp_synthetic_benchmark.py` does the same work with torch DistributedDataParallel.
Example (seed 001 of the course, V100s): --model resnet50 --batch-size 64 --num-iters 5
  -> 336.0 img/s on 1 GPU; 325.2 per GPU, 650.3 in total on 2 nodes x 1 GPU (mpirun_rsh).
"""
import torch
import torch.optim as optim

import horovod.torch as hvd  # Horovod:

from dltutor.core import dist
from dltutor.core.device import device as pick_device
from dltutor.core.hosts import shape_label
from dltutor.horovod import benchmark, world

args = benchmark.parse_args(__doc__)

# Horovod: on CPU workers, a slower cycle and a 32 MiB fusion buffer (see dltutor.horovod.benchmark)
settings = benchmark.horovod_cpu_settings(args.no_cuda or not torch.cuda.is_available())
hvd.init()  # Horovod: start Horovod (rank, size, local_rank come from the launcher)
world.check_world_size(hvd.size())  # Horovod: srun without MPI gives every task a world of one
hosts = dist.print_hosts(gather=hvd.allgather_object)  # Horovod: every rank's host, printed by rank 0
if hvd.rank() == 0:
    print(benchmark.horovod_settings_line(settings), flush=True)
torch.set_num_threads(benchmark.threads_for(args, hvd.local_size()))  # Horovod: cores per worker
device = pick_device(not args.no_cuda, hvd.local_rank())  # Horovod: one GPU per local rank
if device.type == "cuda":
    torch.cuda.set_device(device)

model = benchmark.build_model(args.model, args.num_classes, args.seed).to(device)

# Horovod: scale the learning rate by the number of workers (Adasum adapts by itself)
lr_scaler = 1 if args.use_adasum else hvd.size()  # Horovod:
optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none  # Horovod:
optimizer = hvd.DistributedOptimizer(  # Horovod: all-reduce gradients during backward()
    optimizer, named_parameters=model.named_parameters(),  # Horovod:
    compression=compression,  # Horovod:
    op=hvd.Adasum if args.use_adasum else hvd.Average)  # Horovod:

hvd.broadcast_parameters(model.state_dict(), root_rank=0)  # Horovod: everyone starts equal
hvd.broadcast_optimizer_state(optimizer, root_rank=0)  # Horovod:

data, target = benchmark.synthetic_batch(args.batch_size, args.image_size, args.num_classes,
                                         args.seed + hvd.rank(), device)  # Horovod: own batch

benchmark.run(args, model, optimizer, data, target, device,
              rank=hvd.rank(), world_size=hvd.size(), engine="horovod",  # Horovod:
              extra={"adasum": args.use_adasum, "cycle_time_ms": settings["cycle_time_ms"],
                     "fusion_threshold_bytes": settings["fusion_threshold_bytes"],
                     "hosts": hosts, "shape": shape_label(hosts)})
