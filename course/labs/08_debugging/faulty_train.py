"""Lab 08: a small DDP training run that can be broken on purpose, one fault at a time.

A two-layer MLP with BatchNorm trains on a labelled SYNTHETIC set (dltutor.data.synthetic is not
needed: the set is drawn here from a fixed seed) under DistributedDataParallel, with a
DistributedSampler and SGD. Every step logs the loss with an all-reduce. `--fault` breaks one
thing on rank `--fault-rank` at step `--fault-step` (the fault list is in dltutor.debug.faults):

  skip        the rank skips the loss all-reduce and the stop-flag broadcast: the others hang
  order       the rank calls broadcast before all_reduce, the others the other way round: hang
  shape       the rank all-reduces a tensor of another shape       dtype  ... of another dtype
  set_epoch   sampler.set_epoch is never called: every epoch the same order (all ranks)
  random_op   the rank re-initialises a layer (a random op the others do not run)
  bn_buffer   DDP(forward_sync_buffers=False): BatchNorm running stats drift apart (all ranks)
  outside_ddp the rank applies an extra update to its weights outside DDP
  straggler   the rank sleeps --slow-ms before each backward (a stand-in for a busy core)
  nan         the rank's batch holds an inf at that step (a corrupt sample); --loss-scale reacts
  kill        the rank kills itself with SIGKILL (what the OOM killer does)

`--checks` turns on what a student writes to find the silent ones: a fingerprint of every logged
collective's shape and dtype and of the batch's sample ids, all-gathered each step, and the
checksums of the parameters and buffers (dltutor.debug.checks). A rank that catches an error in
a collective reports it with the time, dumps torch's Flight Recorder into --fr-dir when
TORCH_FR_BUFFER_SIZE is set, and exits 1.

Launch forms (run in this lab's folder):
  python faulty_train.py --tiny                                   # 1 process, no group
  torchrun --nproc-per-node 2 faulty_train.py --tiny              # 2 ranks, healthy
  torchrun --nproc-per-node 2 faulty_train.py --fault straggler --checks   # a slow rank, named
  srun --ntasks 2 python faulty_train.py --tiny                   # Slurm: one task per rank
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
           --rdzv-endpoint $MASTER_ADDR:29500 faulty_train.py --checks   # 2 nodes
Every other --fault runs the same way (--fault outside_ddp --checks: a drifting rank, named); the
hanging ones exit 1 on purpose after --pg-timeout seconds, e.g.
TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun --nproc-per-node 2 faulty_train.py --fault order --pg-timeout 5.
From a notebook: dltutor.debug.runs.run_fault("skip", ...).
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as tdist  # DDP:
from torch.nn.parallel import DistributedDataParallel as DDP  # DDP:
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # DDP:

from dltutor.core import dist, flags
from dltutor.debug import checks, faults


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--fault", choices=faults.FAULTS, default="none", help="what to break")
    p.add_argument("--fault-rank", type=flags.nonnegative_int, default=1, help="the rank it breaks")
    p.add_argument("--fault-step", type=flags.nonnegative_int, default=3,
                   help="the global step at which it breaks")
    p.add_argument("--samples", type=flags.positive_int, default=4096, help="training samples")
    p.add_argument("--batch-size", type=flags.positive_int, default=64, help="per-rank batch")
    p.add_argument("--epochs", type=flags.positive_int, default=3, help="passes over the data")
    p.add_argument("--lr", type=flags.positive_float, default=0.05, help="SGD learning rate")
    p.add_argument("--pg-timeout", type=flags.positive_float, default=300.0,
                   help="seconds before a collective gives up (torch's own default: 30 min)")
    p.add_argument("--slow-ms", type=flags.nonnegative_float, default=150.0,
                   help="straggler: extra ms per step on the faulty rank")
    p.add_argument("--loss-scale", action="store_true",
                   help="dynamic loss scaling (torch.amp.GradScaler): skip steps with inf/NaN")
    p.add_argument("--checks", action="store_true",
                   help="all-gather fingerprints and checksums every step (dltutor.debug.checks)")
    p.add_argument("--fr-dir", default=None,
                   help="where a rank that caught a collective error dumps the Flight Recorder")
    p.add_argument("--seed", type=flags.nonnegative_int, default=0, help="data and model seed")
    flags.add_tiny(p, {"samples": 128, "batch_size": 16, "epochs": 2})
    return flags.parse(p, argv)


def make_data(samples: int, seed: int) -> TensorDataset:
    """SYNTHETIC: 16 features, 4 classes from a fixed random linear rule (the same on every rank)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    return TensorDataset(x, y, torch.arange(samples))


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def main(argv=None) -> int:
    args = parse_args(argv)
    tdist.set_debug_level_from_env()  # DDP: TORCH_DISTRIBUTED_DEBUG, read again in this rank
    ctx = dist.init(timeout=args.pg_timeout)
    fault = faults.Fault(args.fault, args.fault_rank, args.fault_step, ctx.rank, args.slow_ms)
    dist.report(event="start", pid=os.getpid(), tag=os.environ.get("DLTUTOR_LAUNCH_ID"),
                fault=args.fault, fault_rank=args.fault_rank,
                fault_step=args.fault_step, group_limit_s=args.pg_timeout, t=time.time())
    data = make_data(args.samples, args.seed)
    sampler = DistributedSampler(data, ctx.world_size, ctx.rank, seed=args.seed) \
        if ctx.is_distributed else None  # DDP:
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, shuffle=sampler is None)
    model = make_model(args.seed).to(ctx.device)
    by_hand = ctx.is_distributed and faults.detail_debug()   # DDP(...) under DETAIL: SIGSEGV
    gpu = [ctx.device.index] if ctx.device.type == "cuda" else None
    net = DDP(model, device_ids=gpu, **faults.buffer_sync(not fault.on("bn_buffer"))) \
        if ctx.is_distributed and not by_hand else model  # DDP:
    if by_hand:
        dist.rank_print("TORCH_DISTRIBUTED_DEBUG=DETAIL: gradients averaged by hand, not by DDP")
    opt = torch.optim.SGD(net.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler(ctx.device.type, init_scale=2.0 ** 16, enabled=args.loss_scale)
    watch = checks.Checks(ctx, model, enabled=args.checks)
    step = 0
    try:
        for epoch in range(args.epochs):
            if sampler is not None and not fault.on("set_epoch"):
                sampler.set_epoch(epoch)  # DDP: a new shuffle each epoch, the same on every rank
            for x, y, ids in loader:
                t0 = time.perf_counter()
                x, y = x.to(ctx.device), y.to(ctx.device)
                x = fault.corrupt(x, step)                       # nan: an inf in one sample
                loss = torch.nn.functional.cross_entropy(net(x), y)
                fault.delay(step)                                # straggler: a busy core
                t1 = time.perf_counter()
                scaler.scale(loss).backward()                    # DDP: gradients all-reduced here
                if by_hand:
                    faults.average_gradients(model, ctx.world_size)  # DDP: what DDP does
                t2 = time.perf_counter()
                before = watch.snapshot()                        # weights and synced gradients
                grads_finite = checks.finite(p.grad for p in model.parameters())
                scale = scaler.get_scale() if args.loss_scale else None
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
                fault.after_update(model, step)                  # random_op, outside_ddp
                checked = watch.after_step(step, epoch, ids, before, args.lr, scale)
                logged = fault.log_loss(loss.detach(), step, ctx, watch)   # DDP: skip/order/shape/dtype
                t3 = time.perf_counter()
                dist.report(event="step", step=step, epoch=epoch, loss=float(loss.detach()), t=time.time(),
                            logged=logged, compute_s=t1 - t0, backward_s=t2 - t1,
                            step_s=t3 - t0, grads_finite=grads_finite, scale=scale,
                            params_finite=checks.finite(model.parameters()),
                            own_param_sum=checks.checksum(model.parameters()), **checked)
                fault.kill(step)                                 # kill: SIGKILL, no goodbye
                step += 1
        dist.report(event="done", steps=step, t=time.time())
    except RuntimeError as exc:          # a collective timed out or found a mismatch
        faults.caught(exc, ctx, args.fr_dir)
        os._exit(1)                      # a broken group cannot be torn down cleanly
    if ctx.is_distributed:
        tdist.barrier()  # DDP:
    dist.teardown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
