"""Lab 02 — data parallelism with PyTorch DistributedDataParallel (DDP) on CIFAR-10.

Every rank holds a full replica of the model, trains on its own 1/W shard of each global batch
(DistributedSampler) and averages gradients with all-reduce after backward, so the replicas stay
identical. Lines that exist only because of distribution end in a comment tagged DDP.

Launch forms (run in this lab's folder; the script is the same in all of them):
  python train.py --tiny                                  # 1 process, no process group
  torchrun --nproc-per-node 2 train.py --tiny             # 2 ranks on this node
  python -m torch.distributed.run --nproc-per-node 2 train.py --tiny   # the same, no torchrun shim
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
           --rdzv-endpoint $MASTER_ADDR:29500 train.py    # 2 nodes x 4 GPUs, run once per node
  srun --ntasks 2 python train.py --tiny                  # Slurm: one task per rank
  srun --ntasks 8 --ntasks-per-node 4 --gpus-per-task 1 python train.py   # one task per GPU
  sbatch --ntasks 2 --wrap "srun python train.py --tiny"  # a batch job: srun starts the ranks
Under srun, dltutor.core.dist reads SLURM_PROCID/SLURM_NTASKS and MASTER_ADDR from the node list.
Job scripts for a site (partition, GPUs per node, modules) come from its profile in
course/labs/sites/*.toml through dltutor.launch.sites.render_job(site, "train.py", nodes=2,
launcher="srun" or "torchrun"): 2 nodes, the ranks started by srun or by a torchrun per node.
From a notebook cell: launch(dltutor.core.course.lab("02_ddp/train.py"), nproc=2, args=["--tiny"])
(dltutor.launch.run; backend='slurm' inside a Slurm job, nodes=2 for a job on two nodes).

Backend: nccl on GPUs, gloo on CPUs (dltutor.core.device.backend()). Data: CIFAR-10 from
dltutor.data.cifar10.load_cifar10 (offline without CIFAR-10: the real Fashion-MNIST as a labelled
stand-in, else a SYNTHETIC set; the metrics say which). No augmentation: the lab measures scaling, not the best accuracy.

Scaling modes: --weak keeps the per-rank batch (global batch = W x per-rank batch); --strong keeps
the global batch and splits it over the W ranks. Learning rate: the linear scaling rule,
lr = lr_base x global_batch / base_batch (= lr_base x W in weak scaling with the default
base batch), ramped up linearly over --warmup-steps (or --warmup-epochs) from lr_base;
--no-scale-lr keeps lr_base.
Gradient communication: by default DDP all-reduces gradient buckets of --bucket-cap-mb MiB while
backward is still running (overlap). The lab always passes that value (default 25), so its first
bucket is 25 MiB too; DDP left to itself (bucket_cap_mb=None) makes the first bucket 1 MiB. --no-overlap runs backward under DDP's no_sync() (no
communication at all) and then all-reduces every gradient in one flat buffer by hand, after
backward has finished (dltutor.ddp.by_hand.allreduce_gradients): same result, no overlap.

Large-batch study (notebook 02, section 3): --model cnn trains dltutor.ddp.batch_study.small_cnn
(no batch norm) on a global batch --global-batch with --strong; --base-batch and --lr set the linear
scaling rule, --warmup-epochs the warm-up, --no-scale-lr turns the rule off. --eval-every N measures
the test accuracy every N steps (acc_curve) and --target-acc reports the first step that reaches
it (steps_to_target). Such a run on W ranks repeats one run of the notebook's one-process sweep
(dltutor.ddp.batch_study.train_run with world_size=W) up to float rounding.

Timeline (notebook 02, section 4): --profile-steps N records N steps with torch.profiler (the
last N of a --steps run, else the N after the first --timing-skip steps; they are left out of the
step times) and --profile-dir DIR saves each rank's events to DIR/profile.rank<r>.json
(dltutor.ddp.timeline reads them: forward, backward and each bucket's all-reduce in time).

Rank 0 first prints every rank's host (`ranks on hosts: node1 [0], node2 [1] (2 node(s) x 1
rank(s))`) and at the end the global img/s labelled with that shape. Each rank prints one
`DLTUTOR_METRICS {json}` line: its host, every rank's host and the shape, img/s (own and global),
step time and the timed per-step times (step_times_ms, their spread), the profile file (profile),
loss curve (averaged over ranks), lr curve, world size, hardware label (CPU/gloo or GPU/nccl), data
source.
"""
import contextlib
import time

import torch
import torch.distributed as tdist  # DDP:
from torch.nn.parallel import DistributedDataParallel as DDP  # DDP:
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler  # DDP:

from dltutor.core import dist, flags
from dltutor.core.device import hardware_label, synchronize
from dltutor.core.hosts import shape_label
from dltutor.core.train_step import train_step
from dltutor.data import cifar10
from dltutor.data.loaders import to_device_tensors
from dltutor.single import models
from dltutor.ddp.batch_study import small_cnn, steps_to_target
from dltutor.ddp import timeline
from dltutor.ddp.by_hand import allreduce_gradients, param_checksum
from dltutor.ddp.run_stats import reduce_run_stats
from dltutor.ddp.scaling import scaled_lr, split_batch, warmup_factor

TINY = dict(width=4, train_subset=256, test_subset=128, per_rank_batch=16, global_batch=32,
            epochs=2, warmup_steps=0, log_every=4)


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--model", choices=("resnet", "cnn"), default="resnet",
                   help="resnet: models.cifar_resnet; cnn: batch_study.small_cnn (the batch study)")
    p.add_argument("--width", type=flags.positive_int, default=64,
                   help="ResNet width (64 = ResNet-18); the cnn's first layer width")
    p.add_argument("--epochs", type=flags.positive_int, default=30, help="passes over the training set")
    p.add_argument("--steps", type=flags.nonnegative_int, default=0, help="stop after this many steps (0: no limit)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--weak", dest="scaling", action="store_const", const="weak",
                      help="fixed per-rank batch: global batch = W x --per-rank-batch")
    mode.add_argument("--strong", dest="scaling", action="store_const", const="strong",
                      help="fixed global batch --global-batch, split over the W ranks")
    p.set_defaults(scaling="weak")
    p.add_argument("--per-rank-batch", type=flags.positive_int, default=128, help="images per rank per step (--weak)")
    p.add_argument("--global-batch", type=flags.positive_int, default=256, help="images per step, all ranks (--strong)")
    p.add_argument("--lr", type=flags.positive_float, default=0.1, help="base LR, tuned for --base-batch images")
    p.add_argument("--base-batch", type=flags.nonnegative_int, default=0,
                   help="batch --lr is tuned for (0: the per-rank batch with --weak, "
                        "the global batch with --strong)")
    p.add_argument("--no-scale-lr", action="store_true", help="do not apply the linear scaling rule")
    p.add_argument("--warmup-steps", type=flags.nonnegative_int, default=500, help="linear LR warm-up steps")
    p.add_argument("--warmup-epochs", type=flags.nonnegative_float, default=0.0,
                   help="warm-up length in epochs; overrides --warmup-steps when > 0")
    p.add_argument("--warmup-start", type=flags.fraction, default=None,
                   help="first warm-up LR as a fraction of the peak (None: lr / peak lr)")
    p.add_argument("--momentum", type=flags.nonnegative_float, default=0.9, help="SGD momentum")
    p.add_argument("--weight-decay", type=flags.nonnegative_float, default=5e-4, help="SGD weight decay")
    p.add_argument("--bucket-cap-mb", type=flags.positive_float, default=25.0,
                   help="DDP gradient bucket size in MiB (passed to DDP: the first bucket too)")
    p.add_argument("--no-overlap", action="store_true",
                   help="no_sync() backward, then one flat all-reduce by hand")
    p.add_argument("--train-subset", type=flags.nonnegative_int, default=0, help="train images (0: all)")
    p.add_argument("--test-subset", type=flags.nonnegative_int, default=0, help="test images (0: all)")
    p.add_argument("--eval", action="store_true", help="test accuracy after training")
    p.add_argument("--eval-every", type=flags.nonnegative_int, default=0,
                   help="test accuracy every N steps and at the end (acc_curve); 0: off")
    p.add_argument("--target-acc", type=flags.fraction, default=None,
                   help="report the first step whose test accuracy reaches this (needs --eval-every)")
    p.add_argument("--timing-skip", type=flags.nonnegative_int, default=2, help="first steps left out of img/s")
    p.add_argument("--profile-steps", type=flags.nonnegative_int, default=0,
                   help="record N steps with torch.profiler (needs --profile-dir)")
    p.add_argument("--profile-dir", default="", help="where each rank saves its profile.rank<r>.json")
    p.add_argument("--log-every", type=flags.positive_int, default=50, help="rank 0 prints the loss every N steps")
    p.add_argument("--seed", type=int, default=0, help="weights, data and shuffle seed")
    flags.add_tiny(p, TINY)
    a = flags.parse(p, argv)
    if a.profile_steps and not a.profile_dir:
        p.error("--profile-steps needs --profile-dir DIR: each rank writes DIR/profile.rank<r>.json")
    if a.target_acc is not None and not a.eval_every:
        p.error("--target-acc needs --eval-every N (N > 0): the accuracy is measured every N steps")
    return a


def evaluate(model, x, y, ctx, batch=512):
    """Accuracy on (x, y): rank r scores items r, r+W, ... and the counts are summed."""
    model.eval()
    correct = torch.zeros(2, device=ctx.device)
    with torch.no_grad():
        xs, ys = x[ctx.rank::ctx.world_size], y[ctx.rank::ctx.world_size]
        for i in range(0, len(xs), batch):
            pred = model(xs[i:i + batch].to(ctx.device)).argmax(1)
            correct[0] += (pred == ys[i:i + batch].to(ctx.device)).sum()
        correct[1] = len(xs)
    if ctx.is_distributed:
        tdist.all_reduce(correct)  # DDP: add up the ranks' counts
    model.train()
    return (correct[0] / correct[1]).item()


def main(argv=None):
    a = parse_args(argv)
    with dist.session() as ctx:  # DDP: join the process group (no group under plain python)
        hosts = dist.print_hosts()  # DDP: every rank's host name (which node each rank runs on)
        W, dev = ctx.world_size, ctx.device
        b, B = split_batch(W, a.scaling, a.per_rank_batch, a.global_batch)
        base_batch = a.base_batch or (a.per_rank_batch if a.scaling == "weak" else a.global_batch)
        peak_lr = a.lr if a.no_scale_lr else scaled_lr(a.lr, global_batch=B, base_batch=base_batch)
        start = a.warmup_start if a.warmup_start is not None else a.lr / peak_lr
        dist.seed(a.seed)

        train_ds, test_ds, info = cifar10.load_cifar10(train_subset=a.train_subset or None,
                                                    test_subset=a.test_subset or None,
                                                    seed=a.seed, quiet=not ctx.is_main)
        x, y = to_device_tensors(train_ds, "cpu")
        train_set = TensorDataset(x, y)
        sampler = DistributedSampler(train_set, num_replicas=W, rank=ctx.rank,  # DDP: a 1/W shard
                                     shuffle=True, seed=a.seed, drop_last=True)  # DDP: per rank
        loader = DataLoader(train_set, batch_size=b, sampler=sampler, drop_last=True,
                            pin_memory=dev.type == "cuda")  # pinned: the .to(non_blocking) overlaps
        if len(loader) == 0:
            raise SystemExit(f"{len(train_set)} images give no full batch of {b} on each of {W} ranks")
        warmup = round(a.warmup_epochs * len(loader)) if a.warmup_epochs > 0 else a.warmup_steps

        torch.manual_seed(a.seed)  # the same initial weights everywhere (DDP also broadcasts them)
        model = (small_cnn(width=a.width) if a.model == "cnn" else models.cifar_resnet(width=a.width)).to(dev)
        n_params = models.count_parameters(model)
        if ctx.is_distributed:
            model = DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None,  # DDP:
                        bucket_cap_mb=a.bucket_cap_mb)  # DDP: gradients are all-reduced per bucket
        manual = a.no_overlap and ctx.is_distributed
        sync_off = model.no_sync if manual else contextlib.nullcontext  # DDP: --no-overlap

        def by_hand():  # DDP: with --no-overlap, average the gradients here
            if manual:
                allreduce_gradients(model.parameters(), W)  # DDP: one flat all-reduce
        opt = torch.optim.SGD(model.parameters(), lr=peak_lr, momentum=a.momentum,
                              weight_decay=a.weight_decay)
        loss_fn = torch.nn.CrossEntropyLoss()
        dist.rank_print(f"{hardware_label(dev)} world_size={W} {a.scaling} scaling: per-rank batch "
                        f"{b}, global batch {B}; lr {a.lr} -> {peak_lr:g} (warm-up {warmup} "
                        f"steps); data {info.get('label', info['source'])}; {n_params:,} parameters; "
                        f"{'no overlap' if manual else f'bucket_cap_mb={a.bucket_cap_mb}'}; "
                        f"{torch.get_num_threads()} thread(s)/rank", main_only=True)

        losses, lrs, times, heads, acc_curve = [], [], [], [], []
        x_test, y_test = to_device_tensors(test_ds, "cpu") if a.eval or a.eval_every else (None, None)
        plain = model.module if ctx.is_distributed else model  # DDP: evaluate the local replica
        rec = timeline.Recorder(a.profile_steps, (a.steps - a.profile_steps) if a.steps
                                else a.timing_skip, a.profile_dir)
        step, t_first, t_start = 0, None, time.perf_counter()
        for epoch in range(a.epochs):
            sampler.set_epoch(epoch)  # DDP: a new shuffle each epoch, the same order on all ranks
            heads.append(list(sampler)[:4])
            for xb, yb in loader:
                t0 = time.perf_counter()
                t_first = t_first or time.time()
                xb, yb = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
                lr = peak_lr * warmup_factor(step, warmup, start)
                for group in opt.param_groups:
                    group["lr"] = lr
                with rec.step(step):
                    loss, _ = train_step(  # DDP: DDP's backward all-reduces bucket by bucket
                        model, opt, xb, yb, loss_fn=loss_fn,
                        no_sync=sync_off,  # DDP: no_sync() only with --no-overlap
                        before_step=by_hand)  # DDP: --no-overlap: all-reduce after backward
                    synchronize(dev)  # the GPU's queued work is done before the clock is read
                if not rec.active(step):  # a profiled step is slower: not timed
                    times.append(time.perf_counter() - t0)
                losses.append(loss.detach())
                lrs.append(lr)
                step += 1
                if a.eval_every and step % a.eval_every == 0:  # every rank takes part (all-reduce)
                    acc_curve.append((step, evaluate(plain, x_test, y_test, ctx)))
                if step % a.log_every == 0:
                    dist.rank_print(f"epoch {epoch} step {step} loss {loss.item():.4f} lr {lr:.4g}",
                                    main_only=True)
                if a.steps and step >= a.steps:
                    break
            if a.steps and step >= a.steps:
                break
        train_time = time.perf_counter() - t_start

        curve, timed, busy = reduce_run_stats(  # DDP: loss curve = mean over ranks; busy time =
            losses, times, a.timing_skip, W, dev, ctx.is_distributed)  # DDP: the slowest rank's
        acc = None
        if a.eval or a.eval_every:
            acc = acc_curve[-1][1] if acc_curve and acc_curve[-1][0] == step else evaluate(
                plain, x_test, y_test, ctx)
            if a.eval_every and (not acc_curve or acc_curve[-1][0] != step):
                acc_curve.append((step, acc))
        global_rate = B * len(timed) / busy.item()
        dist.rank_print(f"{global_rate:.1f} img/s on {shape_label(hosts)} "
                        f"({hardware_label(dev)}), final loss {curve[-1].item():.5f}", main_only=True)
        dist.report(img_per_s=b * len(timed) / timed.sum().item(), global_img_per_s=global_rate,
                    step_time_ms=1e3 * timed.median().item(),
                    step_time_mean_ms=1e3 * timed.mean().item(),
                    step_times_ms=[round(1e3 * t, 3) for t in timed.tolist()],
                    profile=rec.save(ctx.rank),
                    steps=step, epochs_run=epoch + 1, train_time_s=train_time, t_first_step=t_first,
                    loss_curve=[round(v, 5) for v in curve.tolist()], final_loss=curve[-1].item(),
                    lr_curve=lrs, lr=peak_lr, base_lr=a.lr, warmup_steps=warmup,
                    scaling=a.scaling, per_rank_batch=b, global_batch=B, bucket_cap_mb=a.bucket_cap_mb,
                    overlap=not manual, hardware=hardware_label(dev), data=info["source"],
                    params=n_params, width=a.width, threads=torch.get_num_threads(),
                    launcher=ctx.launcher, hosts=hosts, shape=shape_label(hosts),
                    shard_heads=heads, test_acc=acc, model=a.model,
                    acc_curve=acc_curve, target_acc=a.target_acc,
                    steps_to_target=None if a.target_acc is None else steps_to_target(acc_curve, a.target_acc),
                    param_checksum=param_checksum(model))


if __name__ == "__main__":
    main()
