"""Lab 10 — save, stop, resume: a run that continues bit for bit where it stopped.

A small MLP with dropout trains on the REAL Fashion-MNIST (dltutor.data.fashion_mnist; the first
--train-subset training images) on every rank, wrapped in DistributedDataParallel (--wrap ddp) or
sharded with FSDP2's fully_shard (--wrap fsdp2), with Adam. Every --save-every steps it saves a
checkpoint with torch.distributed.checkpoint (DCP) into --ckpt-dir/step-<NNNNNN>/: the model, the
optimizer, the step, each rank's RNG states and the data position (dltutor.checkpoint.state).
At start it resumes from the newest complete checkpoint there (one with a .metadata file), else
says "no checkpoint in DIR: fresh start". --stop-at S saves and exits cleanly after step S, as a
job warned of its time limit would; run the same command again and it goes on from step S.

Bit for bit: the data order is a function of (--seed, epoch) alone (DistributedSampler.set_epoch),
a resumed run skips the batches already done in its epoch, and dropout draws from the restored
torch generator, so losses and final parameters equal an uninterrupted run's exactly.
--ckpt-parts leaves parts out (e.g. model,optimizer,data: no RNG) to see what each one is for.
Lines that exist only because of distribution end in a comment tagged DDP, FSDP2 or DCP.

Launch forms (run in this lab's folder; the script is the same in all of them):
  python train.py --tiny                                   # 1 process, no process group
  torchrun --nproc-per-node 2 train.py --tiny              # 2 ranks, DDP
  torchrun --nproc-per-node 2 train.py --tiny --wrap fsdp2 # 2 ranks, FSDP2 shards
  torchrun --nproc-per-node 2 train.py --tiny --stop-at 3 --ckpt-dir checkpoints/demo  # run twice
  python -m torch.distributed.run --nproc-per-node 2 train.py --tiny   # the same, no torchrun shim
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
           --rdzv-endpoint $MASTER_ADDR:29500 train.py --ckpt-dir $SCRATCH/ckpt   # 2 nodes
  srun --ntasks 2 python train.py --tiny                   # Slurm: one task per rank
From a notebook cell: launch(dltutor.core.course.lab("10_checkpoint/train.py"), nproc=2,
args=["--tiny", "--ckpt-dir", DIR]) (dltutor.launch.run). Several nodes need a --ckpt-dir that all
of them see (a shared file system).

The default --ckpt-dir is checkpoints/<wrap>-<W>ranks in the current folder (none-1ranks for one
process), so runs of another shape do not resume each other. The RNG part holds one state per
rank: a checkpoint of 2 ranks loads on 3 only with --ckpt-parts model,optimizer (then the model
and the optimizer are resharded exactly; the load names the missing key otherwise). --async-save saves in a background thread on
a process group of its own (dltutor.checkpoint.store.save_async says why). --save-params FILE:
rank 0 writes the final full parameters there (torch.save) for an exact comparison.

Killed, and restarted by torchrun (dltutor.checkpoint.restarts):
  --kill-at S --kill-rank R    rank R SIGKILLs itself right after step S's optimizer step
  --kill-during-save S         rank 0 (DCP's coordinator) SIGKILLs itself inside step S's save,
                               after every rank's shards and before .metadata: a torn folder
Both only on the first attempt (restarts.restart_count() is 0: torchrun's TORCHELASTIC_RESTART_COUNT
plus launch(max_restarts=N)'s DLTUTOR_RESTART_COUNT), and the killed rank
first writes the time and step to --ckpt-dir/killed.json. Under
  TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nproc-per-node 2 --rdzv-backend c10d \
      --rdzv-endpoint 127.0.0.1:29500 --max-restarts 1 train.py --tiny --kill-at 5 --kill-rank 1
torchrun stops the other rank and starts both again; they resume from the newest COMPLETE
checkpoint (a torn folder is named and skipped) and end bit for bit as an uninterrupted run.
The variable: by default the c10d rendezvous shares its TCP store with the workers and the first
attempt's keys are still there when the second starts (pytorch issue 135712). Without it the
restart failed here 3 of 6 times with `Gloo connectFullMesh failed ... Connection refused`
(the course's measured development notes, torch 2.14.1, 2 gloo ranks) and, with this lab's
--kill-at 5, 4 of 6 times (2 that error, 2 second attempts hung past 60 s); with it 0 of 6 in both.
Plain python restarts nothing: the job just dies. The course's launch(..., max_restarts=N)
(dltutor.launch.restart) restarts like torchrun; its ranks see DLTUTOR_RESTART_COUNT instead.
Seeded random failures (how often to save, dltutor.checkpoint.goodput):
  --fail-mtbf M --fail-seed S  each attempt draws its time to failure from an exponential with
                               mean M s and a rank, seeded by (S, attempt); that rank SIGKILLs
                               itself after the first step past that time (counted from the
                               start of its training loop: training and saves, not restarts)
  launch(lab, nproc=2, args=["--fail-mtbf", "5", "--save-every", "20", ...], max_restarts=50)

Warned by the batch system (dltutor.checkpoint.signals; only with --save-on-signal, so that
torchrun's SIGTERM to the survivors of a killed rank keeps its default): on SIGUSR1 (Slurm's
--signal=B:USR1@N, forwarded by the batch shell) or SIGTERM (scancel, the time limit) every rank
ends its current step; an all-reduce of a flag after each step makes every rank stop after the same
step (a signal that reached only some ranks included); they save that step and exit with status 75
(signals.STOPPED_ON_SIGNAL), which requeue.sbatch reads as "saved: requeue me". --pace S sleeps S s
after each step, only so that a 1-minute --time ends mid-training; the output says so.
  sbatch requeue.sbatch        # a time limit mid-training: saved, requeued, resumed (see its header)
  sbatch node_loss.sbatch      # 2 nodes; one dies: Slurm requeues the job, it resumes
Metrics with --save-on-signal: stop_signal (SIGUSR1/SIGTERM, None when it ran to the end),
signal_stop_step, signal_received (this rank's own), slurm_restart_count; always paced_s.

Each rank prints one `DLTUTOR_METRICS {json}` line: the step it resumed from (resumed_from, None
for a fresh start), this run's per-step losses on the rank (losses, from step first_step + 1),
the final step, the final parameters' sha256 (param_digest) and sum of |w| (param_checksum),
each save's step and blocking seconds, the parts, the wrap, world size, data and hardware;
after a restart also restart_count, killed_step/killed_rank/kill_where (from killed.json),
steps_redone (killed step - step resumed from), kill_to_training_s (wall seconds from the kill to
the end of this attempt's first step) and skipped (each torn folder passed over: its files);
rank 0 appends each restart's record to --ckpt-dir/restarts.jsonl too. Always loop_s (seconds in
this attempt's training loop), startup_s (from launch(max_restarts=N) starting this attempt to
its training loop; None in other launches) and fail_plan ([seconds, rank] of --fail-mtbf, else [None, None]).
"""
import os
import sys
import time
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP  # DDP:
from torch.utils.data.distributed import DistributedSampler  # DDP:

from dltutor.checkpoint import compare, restarts, signals, store
from dltutor.checkpoint.state import PARTS, AppState
from dltutor.core import dist, env, flags
from dltutor.core.device import hardware_label
from dltutor.core.train_step import train_step
from dltutor.data import fashion_mnist

TINY = dict(train_subset=192, batch_size=16, steps=8, save_every=2, hidden=32)  # 2 epochs on 2 ranks


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp",
                   help="DDP replicas or FSDP2 shards (one process: the plain model)")
    p.add_argument("--steps", type=flags.positive_int, default=200, help="train until this step")
    p.add_argument("--save-every", type=flags.nonnegative_int, default=50,
                   help="save a checkpoint every K steps (0: only at --stop-at)")
    p.add_argument("--ckpt-dir", default="", help="checkpoint folder (default: checkpoints/<wrap>-<W>ranks)")
    p.add_argument("--stop-at", type=flags.positive_int, default=None,
                   help="save and exit cleanly after this step (a job at its time limit)")
    p.add_argument("--ckpt-parts", type=flags.choice_list(PARTS), default=list(PARTS),
                   help="what the checkpoint holds and a resume restores (the step always)")
    p.add_argument("--async-save", action="store_true",
                   help="DCP async_save on a gloo group of its own; the loop waits only for the copy")
    p.add_argument("--train-subset", type=flags.positive_int, default=8192,
                   help="the first N Fashion-MNIST training images")
    p.add_argument("--batch-size", type=flags.positive_int, default=64, help="images per rank per step")
    p.add_argument("--hidden", type=flags.positive_int, default=256, help="hidden layer width")
    p.add_argument("--dropout", type=flags.nonnegative_float, default=0.1, help="dropout probability")
    p.add_argument("--lr", type=flags.positive_float, default=1e-3, help="Adam learning rate")
    p.add_argument("--seed", type=int, default=0, help="weights, data order and dropout seed")
    p.add_argument("--save-params", default="", help="rank 0 writes the final full parameters here")
    p.add_argument("--kill-at", type=flags.positive_int, default=None,
                   help="first attempt only: --kill-rank SIGKILLs itself after this step's optimizer step")
    p.add_argument("--kill-rank", type=flags.nonnegative_int, default=1, help="the rank --kill-at kills")
    p.add_argument("--kill-during-save", type=flags.positive_int, default=None,
                   help="first attempt only: rank 0 dies inside this step's save, before .metadata")
    p.add_argument("--fail-mtbf", type=flags.positive_float, default=None,
                   help="every attempt: a seeded random rank dies after an exponential time, this mean (s)")
    p.add_argument("--fail-seed", type=int, default=0, help="seed of --fail-mtbf's times and ranks")
    p.add_argument("--save-on-signal", action="store_true",
                   help="on SIGUSR1/SIGTERM every rank ends its step, saves it and exits 75 (see docstring)")
    p.add_argument("--pace", type=flags.nonnegative_float, default=0.0,
                   help="sleep this many s after each step (a batch system's minute must end mid-training)")
    flags.add_tiny(p, TINY)
    a = flags.parse(p, argv)
    if a.kill_during_save and a.async_save:
        p.error("--kill-during-save kills a synchronous save: leave out --async-save")
    if a.dropout >= 1:
        p.error("--dropout must be below 1")
    return a


def load_data(n: int):
    """The first n Fashion-MNIST training images as 784 normalised floats, and their labels."""
    sets = fashion_mnist.load(env.data_dir())
    if sets is None:
        raise SystemExit("lab 10 trains on the real Fashion-MNIST and found none: "
                         + fashion_mnist.fix_message(fashion_mnist.source_dir()))
    train = sets[0]
    x = torch.from_numpy(train.data[:n, 2:30, 2:30, 0].reshape(min(n, len(train)), -1).copy())
    x = (x.float() / 255.0 - fashion_mnist.MEAN[0]) / fashion_mnist.STD[0]
    return x, torch.as_tensor(train.targets[:n])


def make_model(a, ctx):
    torch.manual_seed(a.seed)  # the same initial weights on every rank
    nn, h = torch.nn, a.hidden
    model = nn.Sequential(nn.Linear(784, h), nn.ReLU(), nn.Dropout(a.dropout),  # dropout draws
                          nn.Linear(h, h), nn.ReLU(), nn.Dropout(a.dropout),    # from torch's RNG
                          nn.Linear(h, 10)).to(ctx.device)
    if not ctx.is_distributed:
        return model, "none"
    if a.wrap == "ddp":
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        return DDP(model, device_ids=ids), "ddp"  # DDP: replicas, gradients all-reduced
    from torch.distributed.device_mesh import init_device_mesh  # FSDP2:
    from torch.distributed.fsdp import fully_shard  # FSDP2:
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))  # FSDP2: 1-D mesh of the ranks
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)  # FSDP2: each Linear's weights split over the ranks
    return fully_shard(model, mesh=mesh), "fsdp2"  # FSDP2: the root


def batches(sampler, b: int, epoch: int, offset: int):
    """(sample indices, position after this batch) from (epoch, offset) on, forever."""
    while True:
        sampler.set_epoch(epoch)  # DDP: the epoch's order, from (seed, epoch) alone
        order = list(sampler)
        n = len(order) // b
        for i in range(offset, n):
            after = {"epoch": epoch, "offset": i + 1} if i + 1 < n else {"epoch": epoch + 1, "offset": 0}
            yield order[i * b:(i + 1) * b], after
        epoch, offset = epoch + 1, 0


class Saver:
    """Saves `app` sync or async (waiting for the previous async save first); logs blocking time."""

    def __init__(self, root, app, use_async: bool):
        self.root, self.app, self.pending, self.log = root, app, None, []
        self.group = store.async_group() if use_async else None  # DCP: a group of its own
        self.use_async = use_async

    def __call__(self, writer=None):
        t0 = time.perf_counter()
        self.wait()
        if self.use_async:
            self.pending = store.save_async(self.root, self.app, self.group)  # DCP: in background
        else:
            store.save(self.root, self.app, writer)  # DCP: every rank writes its part
        self.log.append([self.app.step, time.perf_counter() - t0])

    def wait(self):
        if self.pending is not None:
            self.pending.result()
            self.pending = None


def restart_metrics(attempt, kill, resumed, back_after, skipped) -> dict:
    """What a restart cost, for the metrics line (only the restart count without a kill)."""
    most = os.environ.get("TORCHELASTIC_MAX_RESTARTS")  # torchrun: its --max-restarts
    out = {"restart_count": attempt, "max_restarts": None if most is None else int(most),
           "skipped": skipped}
    if kill:
        out.update(killed_step=kill["step"], killed_rank=kill["rank"], kill_where=kill["where"],
                   steps_redone=kill["step"] - (resumed or 0), kill_to_training_s=back_after)
    return out


def main(argv=None):
    a = parse_args(argv)
    stop = signals.StopOnSignal() if a.save_on_signal else None  # Slurm: USR1/TERM -> a flag, early
    with dist.session() as ctx:  # DDP: join the process group (no group under plain python)
        W = ctx.world_size
        x, y = load_data(a.train_subset)
        sampler = DistributedSampler(range(len(x)), num_replicas=W, rank=ctx.rank,  # DDP: a 1/W
                                     shuffle=True, seed=a.seed, drop_last=True)  # DDP: shard each
        if len(sampler) < a.batch_size:
            raise SystemExit(f"{len(x)} images give no full batch of {a.batch_size} on each of {W} ranks")
        model, wrap = make_model(a, ctx)
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
        dist.seed(a.seed)  # dropout: seed + rank on each rank
        ckpt_dir = Path(a.ckpt_dir or f"checkpoints/{wrap}-{W}ranks")  # none-1ranks: one process
        app = AppState(model, opt, parts=a.ckpt_parts, rank=ctx.rank)
        if a.kill_at and a.kill_rank >= W:
            raise SystemExit(f"--kill-rank {a.kill_rank}: this run has ranks 0..{W - 1}")
        attempt = restarts.restart_count()  # torchrun: 0, then 1 after the first restart
        kill = restarts.read_kill(ckpt_dir) if attempt else None  # torchrun: what the killed rank wrote
        fail_s, fail_rank = restarts.failure_plan(a.fail_mtbf, a.fail_seed, attempt, W) if a.fail_mtbf \
            else (None, None)  # --fail-mtbf: when and which rank this attempt dies
        skipped = {name: sorted(os.listdir(ckpt_dir / name)) for name in store.torn(ckpt_dir)}
        resumed = store.load(ckpt_dir, app)  # DCP: newest complete checkpoint, or None
        step = app.step
        if resumed is not None:
            dist.rank_print(f"resumed from step {resumed} ({ckpt_dir}; parts {','.join(a.ckpt_parts)}; "
                            f"data at epoch {app.data['epoch']}, batch {app.data['offset']})", main_only=True)
        save = Saver(ckpt_dir, app, a.async_save)
        if a.pace:
            dist.rank_print(f"each step paced to at least {a.pace} s (--pace): this model trains faster "
                            "than a batch system's time limit can end", main_only=True)
        losses, stream = [], batches(sampler, a.batch_size, app.data["epoch"], app.data["offset"])
        end = min(a.steps, a.stop_at or a.steps)
        back_after, loop_t0 = None, time.perf_counter()  # s from the kill to this attempt's first step
        startup_s = restarts.startup_s()  # goodput: the attempt's launch -> its training
        while step < end:
            idx, after = next(stream)
            loss, _ = train_step(model, opt, x[idx].to(ctx.device), y[idx].to(ctx.device))  # DDP:
            step += 1
            if kill and back_after is None:
                back_after = time.time() - kill["time"]  # torchrun: kill -> training again
                if ctx.is_main:  # every restart's cost, not only the last one's (killed.json)
                    restarts.note_restart(ckpt_dir, restart_metrics(attempt, kill, resumed, back_after, {}))
            if step == a.kill_at and ctx.rank == a.kill_rank and attempt == 0:  # torchrun:
                restarts.kill_now(ckpt_dir, step, ctx.rank)  # torchrun: SIGKILL, no cleanup
            if ctx.rank == fail_rank and time.perf_counter() - loop_t0 >= fail_s:  # --fail-mtbf: its time
                restarts.kill_now(ckpt_dir, step, ctx.rank, where=f"{fail_s:.2f} s into attempt {attempt}")
            if a.pace:
                time.sleep(a.pace)  # Slurm: only so that --time ends mid-training
            losses.append(loss.item())
            app.step, app.data = step, after
            if (a.save_every and step % a.save_every == 0) or step == a.stop_at:
                torn = step == a.kill_during_save and attempt == 0  # DCP: die mid-save
                save(restarts.TornWriter(store.step_dir(ckpt_dir, step), ckpt_dir, step, ctx.rank)
                     if torn else None)
            if stop and step < end and stop.agreed(ctx.device):  # DDP: every rank, the same step
                if not save.log or save.log[-1][0] != step:
                    save()  # DCP: this step, then exit STOPPED_ON_SIGNAL
                dist.rank_print(f"{stop.stop}: stopped after step {step}, saved", main_only=True)
                break
        save.wait()  # DCP: an async save must finish before the process ends
        full = compare.full_model_state(model)  # FSDP2: gathers the shards (every rank calls it)
        if a.save_params and ctx.is_main:
            torch.save(full, a.save_params)
        dist.rank_print(f"{hardware_label(ctx.device)} {wrap} on {W} rank(s): steps {step - len(losses)}"
                        f"..{step}, last loss {losses[-1] if losses else float('nan'):.5f}, "
                        f"parameters {compare.digest(full)[:16]}", main_only=True)
        dist.report(resumed_from=resumed, first_step=step - len(losses), losses=losses, steps=step,
                    stopped_at=a.stop_at if step == a.stop_at else None, wrap=wrap,
                    parts=list(a.ckpt_parts), ckpt_dir=str(ckpt_dir), saves=save.log,
                    async_save=a.async_save, data_position=app.data, data=fashion_mnist.FASHION,
                    param_digest=compare.digest(full),
                    param_checksum=float(sum(v.double().abs().sum() for v in full.values())),
                    hardware=hardware_label(ctx.device), backend=ctx.backend,
                    paced_s=a.pace, **(stop.metrics(step) if stop else {}),
                    loop_s=time.perf_counter() - loop_t0, fail_plan=[fail_s, fail_rank], startup_s=startup_s,
                    **restart_metrics(attempt, kill, resumed, back_after, skipped))
        return signals.STOPPED_ON_SIGNAL if stop and stop.stop else 0


if __name__ == "__main__":
    code = main()  # 75 after a stop on a signal
    sys.exit(code)  # looked up after main(): the sys.exit that dltutor.core.rank_exit records
