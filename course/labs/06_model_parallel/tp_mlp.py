"""Lab 06 (tensor parallelism): a Megatron-style MLP block and attention block split over the ranks,
written out (column-parallel, then row-parallel, one all-reduce each way) and done by torch's own
DTensor `parallelize_module` (ColwiseParallel / RowwiseParallel); both checked against the same
block on one process (output, input gradient, every parameter gradient) and against each other.

Per block it reports the errors, the all-reduces each direction made and their bytes (counted
by the from-scratch layers, and by torch's CommDebugMode for DTensor) beside the formula
tokens x d_model x 4 bytes, and the time of forward+backward split vs whole: every one of the
--iters runs (the two alternated, run i of each a pair) and the fastest of each. "Whole" is ONE
process alone (rank 0, the other ranks waiting) with as many threads as the ranks have cores
between them, so the split is timed against one process on the same cores.
Every rank holds the same input (tensor-parallel ranks share the batch).

Launch forms (run in this lab's folder):
    python tp_mlp.py --tiny                                  # 1 rank: the split is the whole
    torchrun --nproc-per-node 2 tp_mlp.py --tiny             # 2 tensor-parallel ranks
    torchrun --nproc-per-node 4 tp_mlp.py                    # 4 ranks (heads and hidden split 4 ways)
    srun --ntasks 2 python tp_mlp.py --tiny                  # Slurm: one task per rank
From a notebook: dltutor.model_parallel.runs.run_tp(nproc=2).
"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist  # TP:

from dltutor.core import dist as ddist
from dltutor.core import flags
from dltutor.core.device import backend, hardware_label, synchronize
from dltutor.core.env import cpu_cores
from dltutor.model_parallel import dtensor_tp as D
from dltutor.model_parallel import tensor as T


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--d-model", type=flags.positive_int, default=512, help="model width")
    p.add_argument("--hidden", type=flags.positive_int, default=2048, help="MLP hidden width")
    p.add_argument("--heads", type=flags.positive_int, default=8, help="attention heads")
    p.add_argument("--batch", type=flags.positive_int, default=8, help="sequences per step")
    p.add_argument("--seq", type=flags.positive_int, default=128, help="tokens per sequence")
    p.add_argument("--iters", type=flags.positive_int, default=10, help="timed forward+backward passes")
    p.add_argument("--seed", type=flags.nonnegative_int, default=0, help="same on every rank")
    flags.add_tiny(p, {"d_model": 64, "hidden": 256, "heads": 8, "batch": 2, "seq": 16, "iters": 3})
    a = flags.parse(p, argv)
    if a.d_model % a.heads:
        p.error(f"--heads {a.heads} does not divide --d-model {a.d_model}: pick heads that do")
    return a


def check_split(a, world: int) -> None:
    """Heads and hidden units are dealt out whole: refuse sizes the ranks cannot share."""
    if a.heads % world or a.hidden % world:
        raise SystemExit(f"tp_mlp.py: --heads {a.heads} and --hidden {a.hidden} must both divide "
                         f"by the {world} ranks; give multiples of {world}")


def loss_of(out):
    return out.float().square().mean()


def fwd_bwd(block, x):
    x = x.detach().requires_grad_()
    out = block(x)
    loss_of(out).backward()
    return out.detach(), x.grad


def timed_ms(blocks, x, iters: int, dev, alone=(), threads: int = 1) -> list[list[float]]:
    """Forward+backward times (ms) of each block in `blocks`, `iters` runs each, the blocks
    alternated run by run so that whatever else the machine does hits all of them alike. One
    untimed run of each first warms up. Blocks whose index is in `alone` run on rank 0 only, with
    `threads` intra-op threads, while the other ranks wait at a barrier: one process alone on the
    cores the ranks share (their lists stay empty on the other ranks)."""
    times = [[] for _ in blocks]
    group = dist.is_initialized() and dist.get_world_size() > 1
    for i in range(iters + 1):
        for k, block in enumerate(blocks):
            solo = k in alone
            if group and solo:
                dist.barrier()                   # everyone idle before the solo run starts
            if not solo or not group or dist.get_rank() == 0:
                saved = torch.get_num_threads()
                torch.set_num_threads(threads if solo else saved)
                synchronize(dev)
                t = time.perf_counter()
                fwd_bwd(block, x)
                synchronize(dev)
                if i:
                    times[k].append((time.perf_counter() - t) * 1e3)
                torch.set_num_threads(saved)
                block.zero_grad(set_to_none=True)
            if group and solo:
                dist.barrier()
    return times


def one_block(name, full, split_cls, x, a, ctx, mesh) -> dict:
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    out_ref, dx_ref = fwd_bwd(full, x)                       # the whole block on this process
    log = T.CommLog()
    split = split_cls(full, rank, world, log).to(dev)        # TP: this rank's shard
    out, dx = fwd_bwd(split, x)
    dt = D.parallelized_copy(full, mesh)                     # TP: torch's own split
    dt.zero_grad(set_to_none=True)
    xd = x.detach().requires_grad_()
    out_dt, counts = D.forward_backward_counted(dt, xd, loss_of)
    shards, whole = D.local_grads(dt), D.full_grads(dt)
    ref = dict(full.named_parameters())
    kinds = T.split_kinds(split)
    tokens = a.batch * a.seq
    return {
        "block": name,
        "out_err": (out - out_ref).abs().max().item(),
        "dx_err": (dx - dx_ref).abs().max().item(),
        "grad_err": T.max_grad_error(full, split, rank, world),
        "out_scale": out_ref.abs().max().item(), "dx_scale": dx_ref.abs().max().item(),
        "grad_scale": max(p.grad.abs().max().item() for p in full.parameters()),
        "dtensor_out_err": (out_dt - out_ref).abs().max().item(),
        "dtensor_grad_err": max((whole[n] - p.grad).abs().max().item() for n, p in ref.items()),
        "scratch_vs_dtensor_err": max(
            max((out - out_dt).abs().max().item(), (dx - xd.grad).abs().max().item()),
            max((p.grad - shards[n]).abs().max().item() for n, p in split.named_parameters())),
        "scratch_vs_dtensor_rel": max(  # each part relative to the whole block's largest value
            (out - out_dt).abs().max().item() / out_ref.abs().max().item(),
            (dx - xd.grad).abs().max().item() / dx_ref.abs().max().item(),
            max((p.grad - shards[n]).abs().max().item() for n, p in split.named_parameters())
            / max(q.grad.abs().max().item() for q in full.parameters())),
        "sharded_params": sorted(n for n, k in kinds.items() if k != "whole"),
        "allreduce_forward": log.count("forward"), "allreduce_backward": log.count("backward"),
        "bytes_forward": log.nbytes("forward"), "bytes_backward": log.nbytes("backward"),
        "formula_bytes": T.block_allreduce_bytes(tokens, a.d_model, x.element_size()),
        "dtensor_collectives": counts,
        "params_full": sum(p.numel() for p in full.parameters()),
        "params_per_rank": sum(p.numel() for p in split.parameters()),
        **timings(full, split, x, a.iters, dev, world),
    }


def whole_threads(world: int, dev) -> int:
    """Threads of the one-process baseline: the cores the `world` ranks share (1 on a GPU)."""
    return 1 if dev.type != "cpu" else max(1, min(world, cpu_cores()))


def timings(full, split, x, iters: int, dev, world: int = 1) -> dict:
    """The whole block (rank 0 ALONE, on the cores the ranks share) and the split block (every
    rank) timed alternately, run i of each a pair: every run (ms) and the fastest of each."""
    threads = whole_threads(world, dev)
    whole, parts = timed_ms([full, split], x, iters, dev, alone=(0,), threads=threads)
    return {"ms_whole": min(whole) if whole else float("nan"), "ms_split": min(parts),
            "ms_whole_runs": whole, "ms_split_runs": parts, "timed_runs": iters,
            "whole_threads": threads, "cores": cpu_cores() if dev.type == "cpu" else None}


def run(a, ctx) -> dict:
    """Both blocks on the process group `ctx` belongs to; prints on rank 0, returns the metrics."""
    check_split(a, ctx.world_size)
    torch.manual_seed(a.seed)  # TP: every rank builds the same full block and input
    mlp = T.MLP(a.d_model, a.hidden).to(ctx.device)
    attn = T.Attention(a.d_model, a.heads).to(ctx.device)
    x = torch.randn(a.batch, a.seq, a.d_model, device=ctx.device)
    mesh = D.tp_mesh(ctx.device, ctx.world_size)        # TP: 1-D mesh over the ranks
    rows = [one_block("mlp", mlp, T.TPMLP, x, a, ctx, mesh),
            one_block("attention", attn, T.TPAttention, x, a, ctx, mesh)]
    if ctx.rank == 0:
        print(f"# tensor parallel on {ctx.world_size} rank(s), {hardware_label(ctx.device)}")
        for r in rows:
            print(f"{r['block']:>9}: out err {r['out_err']:.1e}, grad err {r['grad_err']:.1e}, "
                  f"DTensor err {r['dtensor_out_err']:.1e}; all-reduces fwd/bwd "
                  f"{r['allreduce_forward']}/{r['allreduce_backward']} of {r['bytes_forward']} B "
                  f"(formula {r['formula_bytes']} B); fastest of {r['timed_runs']}: "
                  f"{r['ms_whole']:.1f} ms whole (1 process alone, {r['whole_threads']} thread(s)), "
                  f"{r['ms_split']:.1f} ms split")
    return dict(blocks=rows, hardware=hardware_label(ctx.device), d_model=a.d_model,
                hidden=a.hidden, heads=a.heads, batch=a.batch, seq=a.seq)


def main(argv=None) -> int:
    a = parse_args(argv)
    with ddist.session() as ctx:  # TP: torchrun / srun variables -> process group
        if not dist.is_initialized():  # plain python: a group of one, so DTensor runs too
            dist.init_process_group(backend(ctx.device), store=dist.HashStore(), rank=0, world_size=1)
        ddist.report(**run(a, ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
