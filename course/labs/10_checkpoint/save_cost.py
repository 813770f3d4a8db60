"""Lab 10 — what a checkpoint costs: seconds per save, the time the loop is blocked, bytes on disk.

Lab 10's MLP (train.py's make_model, wrapped in DDP or sharded with FSDP2, with Adam) at each
--hidden width trains one step (Adam's moments exist from then on), then saves with
torch.distributed.checkpoint (DCP) into --ckpt-dir/step-<N>/, --repeats times after --warmup
untimed rounds, in three ways (their order rotates from repeat to repeat):
  page cache     a sync save with DCP's FileSystemWriter(sync_files=False): the clock stops when
                 the bytes are in the OS's page cache (RAM), not yet on the disk (a lower bound)
  fsync'd        a sync save with DCP's default writer, which fsyncs every file it writes, and
                 then the step folder itself: the clock stops when the checkpoint is on the disk
  async          dltutor.checkpoint.store.save_async: the loop is blocked only while the state is
                 copied to CPU memory (async_blocked); the save (fsync'd) goes on in a thread while
                 the loop trains --overlap-steps steps, and its end is stamped (async_total)
The async save runs on a gloo group of its own (store.async_group): on the default group its
collectives and the loop's all-reduces interleave and hang (the course's measured notes on DCP
over gloo; store.py says more). Inputs are random numbers: what a save costs does not depend on
them. Every rank times every save between barriers; rank 0 reads each size's checkpoint bytes
from its .metadata (dltutor.checkpoint.cost.checkpoint_bytes) and deletes the folders.
Lines that exist only because of distribution end in a comment tagged DDP, FSDP2 or DCP.

Launch forms (run in this lab's folder):
  python save_cost.py --tiny                                   # 1 process, no process group
  torchrun --nproc-per-node 2 save_cost.py --tiny              # 2 ranks, DDP
  torchrun --nproc-per-node 2 save_cost.py --wrap fsdp2        # 2 ranks, FSDP2 shards
  python -m torch.distributed.run --nproc-per-node 2 save_cost.py --tiny   # no torchrun shim
  srun --ntasks 2 python save_cost.py --tiny                   # Slurm: one task per rank
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
           --rdzv-endpoint $MASTER_ADDR:29500 save_cost.py --ckpt-dir $SCRATCH/cost   # 2 nodes
From a notebook cell: dltutor.checkpoint.cost.measure(nproc=2) (it launches this script with
dltutor.launch.run.launch and returns the table). Several nodes need a --ckpt-dir all of them see.

Each rank prints one `DLTUTOR_METRICS {json}` line: per size (sizes: hidden, params, and the
seconds of each repeat: page_cache, fsync, async_blocked, async_total; rank 0 also bytes: the
checkpoint's bytes by part), the file system type of --ckpt-dir (fs), wrap, warm-up rounds,
overlap steps, world size, backend and hardware.
"""
import shutil
import sys
import time
from argparse import Namespace
from pathlib import Path

import torch
import torch.distributed as tdist  # DDP:
from torch.distributed.checkpoint import FileSystemWriter  # DCP:

from dltutor.checkpoint import cost, store
from dltutor.checkpoint.state import AppState
from dltutor.core import dist, flags
from dltutor.core.device import hardware_label
from dltutor.core.train_step import train_step

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import make_model  # noqa: E402  lab 10's MLP, the very model train.py trains

MODES = ("page_cache", "fsync", "async")
TINY = dict(hidden=[256, 1024, 2048], repeats=3, warmup=1, overlap_steps=1)


def widths(text) -> list[int]:
    """'256,1024' -> [256, 1024]."""
    return [flags.positive_int(v) for v in text.split(",")]


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--hidden", type=widths, default="1024,2048,4096",
                   help="hidden widths, comma-separated: one model size each")
    p.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp",
                   help="DDP replicas or FSDP2 shards (one process: the plain model)")
    p.add_argument("--repeats", type=flags.positive_int, default=5, help="timed saves per way and size")
    p.add_argument("--warmup", type=flags.nonnegative_int, default=1, help="untimed rounds per size")
    p.add_argument("--overlap-steps", type=flags.nonnegative_int, default=2,
                   help="training steps the loop runs while an async save goes on")
    p.add_argument("--batch-size", type=flags.positive_int, default=32, help="inputs per rank per step")
    p.add_argument("--ckpt-dir", default="checkpoints/save-cost",
                   help="where the step folders go (deleted after each size)")
    p.add_argument("--seed", type=int, default=0, help="weights and inputs seed")
    flags.add_tiny(p, TINY)
    a = flags.parse(p, argv)
    if a.repeats < 2:
        p.error("--repeats must be at least 2: one save gives no interval")
    return a


def step(model, opt, a, ctx):
    """One training step on random inputs (a DDP all-reduce, or FSDP2's collectives)."""
    x = torch.randn(a.batch_size, 784, device=ctx.device)
    y = torch.randint(0, 10, (a.batch_size,), device=ctx.device)
    train_step(model, opt, x, y)  # DDP: gradients all-reduced on the default group


def barrier(ctx):
    if ctx.is_distributed:
        tdist.barrier()  # DDP: every rank starts (and ends) a timed save together


def sync_save(root, app, ctx, fsync: bool) -> float:
    """Seconds of one sync save, barrier to barrier (fsync'd: files, then the folder)."""
    path = store.step_dir(root, app.step)
    writer = None if fsync else FileSystemWriter(str(path), sync_files=False)  # DCP: page cache
    barrier(ctx)
    t0 = time.perf_counter()
    store.save(root, app, writer)  # DCP: every rank writes its part, rank 0 .metadata
    if fsync and ctx.is_main:
        cost.fsync_folder(path)
    barrier(ctx)
    return time.perf_counter() - t0


def async_save(root, app, ctx, group, model, opt, a) -> tuple[float, float]:
    """(seconds the loop was blocked, seconds until the save was done) of one async save."""
    barrier(ctx)
    done_at = []
    t0 = time.perf_counter()
    future = store.save_async(root, app, group)  # DCP: copies the state, saves in a thread
    blocked = time.perf_counter() - t0
    future.add_done_callback(lambda _: done_at.append(time.perf_counter()))
    for _ in range(a.overlap_steps):
        step(model, opt, a, ctx)  # DDP: the loop's collectives, while the save runs on `group`
    future.result()
    return blocked, done_at[0] - t0


def measure_size(hidden, a, ctx, root, group) -> dict:
    """Every timed save of one model size, and (rank 0) its checkpoint's bytes."""
    model, _ = make_model(Namespace(seed=a.seed, hidden=hidden, dropout=0.0, wrap=a.wrap), ctx)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    params = sum(p.numel() for p in model.parameters())  # FSDP2: DTensors count every shard
    step(model, opt, a, ctx)
    app = AppState(model, opt, rank=ctx.rank)
    out = {"hidden": hidden, "params": params, **{t: [] for t in cost.TIMES}}
    for r in range(a.warmup + a.repeats):
        for mode in MODES[r % 3:] + MODES[:r % 3]:  # the order rotates: no way always goes first
            app.step += 1
            got = (async_save(root, app, ctx, group, model, opt, a) if mode == "async"
                   else (sync_save(root, app, ctx, fsync=mode == "fsync"),))
            if r >= a.warmup:
                for name, secs in zip(("async_blocked", "async_total") if mode == "async" else (mode,), got):
                    out[name].append(secs)
    barrier(ctx)
    if ctx.is_main:
        out["bytes"] = cost.checkpoint_bytes(store.newest_complete(root))
        for _, folder in store.checkpoints(root):
            shutil.rmtree(folder)
    barrier(ctx)
    dist.rank_print(f"hidden {hidden}: {params:,} parameters, fsync'd sync save "
                    f"{sum(out['fsync']) / a.repeats:.3f} s, async blocked "
                    f"{sum(out['async_blocked']) / a.repeats:.4f} s", main_only=True)
    return out


def main(argv=None):
    a = parse_args(argv)
    with dist.session() as ctx:  # DDP: join the process group (no group under plain python)
        root = Path(a.ckpt_dir)
        if store.checkpoints(root):  # every rank: none may wait at the barrier for a rank gone
            raise SystemExit(f"{root} holds step folders already: give an empty --ckpt-dir")
        if ctx.is_main:
            root.mkdir(parents=True, exist_ok=True)
        barrier(ctx)
        group = store.async_group()  # DCP: the async saves' own gloo group (every rank, once)
        torch.manual_seed(a.seed + ctx.rank)  # inputs differ per rank
        sizes = [measure_size(h, a, ctx, root, group) for h in a.hidden]
        fs = cost.fs_type(root)
        if ctx.is_main and not any(root.iterdir()):
            root.rmdir()
        dist.report(sizes=sizes, fs=fs, wrap=a.wrap if ctx.is_distributed else "none",
                    warmup=a.warmup, overlap_steps=a.overlap_steps, repeats=a.repeats,
                    backend=ctx.backend, hardware=hardware_label(ctx.device))


if __name__ == "__main__":
    main()
