"""Lab 09 (long sequences): attention with the sequence split over the ranks -- the course's ring
attention (K/V blocks passed round the ring, merged with the online-softmax rule, its own
backward), Ulysses (all-to-all from a sequence split to a head split and back) and torch's own
`context_parallel` -- each checked against the same attention on one process.

Every rank builds the same whole q, k, v (same seed) and keeps its shard. It reports:
  * exactness: max |error| of the output and of dq, dk, dv against one process (gathered: the
    largest over the ranks), fp64 and fp32, causal and not, contiguous and zigzag sharding;
  * blocks of work and bytes sent by this rank, counted, beside `ring.blocks_formula` and the
    `bytes_formula` of the ring and of Ulysses;
  * torch's context_parallel: what it did here (CommDebugMode's collectives, or its error);
  * peak memory of attention per rank for each --mem-seqs length (dltutor.context_parallel.memory
    says what is measured): the ring's shard on this rank, and the whole sequence on one process
    (rank 0), beside the formula;
  * forward+backward time (ms, the slowest rank per run), the implementations alternated run by
    run, --iters runs each after one warm-up; "one process" (the written-out attention, and
    torch's fused SDPA) runs on rank 0 alone, with one rank's threads, while the others wait.
    Labelled CPU/gloo on the CPU, where the ranks share the machine's cores.

Launch forms (run in this lab's folder):
    python ring_attention.py --tiny                              # 1 rank: the split is the whole
    torchrun --nproc-per-node 2 ring_attention.py --tiny         # 2 ranks
    torchrun --nproc-per-node 4 ring_attention.py                # 4 ranks
    srun --ntasks 4 python ring_attention.py                     # Slurm: one task per rank
From a notebook: dltutor.context_parallel.runs.run_lab(nproc=2, tiny=True).
"""
from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist  # CP:
import torch.nn.functional as F

from dltutor.context_parallel import attention as A
from dltutor.context_parallel import memory as M
from dltutor.context_parallel import ring, sharding, torch_cp, ulysses
from dltutor.core import dist as ddist
from dltutor.core import flags
from dltutor.core.device import backend, hardware_label, synchronize

IMPLS = ("course", "ulysses", "torch")


def seq_list(text) -> list[int]:
    """A comma-separated list of sequence lengths: '256,512,1024'."""
    return [flags.positive_int(t) for t in str(text).split(",") if t.strip()] or [flags.positive_int(text)]


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--batch", type=flags.positive_int, default=1, help="sequences")
    p.add_argument("--heads", type=flags.positive_int, default=8, help="attention heads")
    p.add_argument("--seq", type=flags.positive_int, default=1024, help="tokens per sequence (checks, times)")
    p.add_argument("--head-dim", type=flags.positive_int, default=64, help="width of one head")
    p.add_argument("--impl", type=flags.choice_list(IMPLS), default=list(IMPLS),
                   help="implementations, comma-separated (torch: where its forward+backward runs)")
    p.add_argument("--layouts", type=flags.choice_list(sharding.LAYOUTS), default=list(sharding.LAYOUTS),
                   help="sharding of the sequence for the ring")
    p.add_argument("--mem-seqs", type=seq_list, default=[512, 1024, 2048], help="lengths for the memory sweep")
    p.add_argument("--iters", type=flags.positive_int, default=5, help="timed forward+backward runs")
    p.add_argument("--seed", type=flags.nonnegative_int, default=0, help="same on every rank")
    flags.add_tiny(p, {"heads": 4, "seq": 64, "head_dim": 16, "mem_seqs": [32, 64, 128], "iters": 3})
    a = flags.parse(p, argv)
    check_sizes(p, a, ddist.detect()["world_size"])
    return a


def check_sizes(p, a, world: int) -> None:
    """Sizes the ranks cannot share end here: one sentence, exit 2 (before any rank starts work)."""
    try:
        for seq in [a.seq, *a.mem_seqs]:
            for layout in a.layouts:
                sharding.check(seq, world, layout)
        if "ulysses" in a.impl:
            ulysses.check(a.heads, world)
    except ValueError as exc:
        p.error(str(exc))


def whole(a, seq, dtype, dev, seed):
    """q, k, v and the output weight w, the same on every rank (the seed)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(a.batch, a.heads, seq, a.head_dim, generator=g, dtype=dtype).to(dev)
            for _ in range(4)]


def attend(impl, causal, layout, stats=None):
    """The local attention function of `impl` (local shards in, local output)."""
    if impl == "course":
        return lambda q, k, v: ring.ring_attention(q, k, v, causal=causal, layout=layout, stats=stats)  # CP:
    return lambda q, k, v: ulysses.ulysses_attention(q, k, v, causal=causal, stats=stats)  # CP:


def max_over_ranks(x: float, dev) -> float:
    t = torch.tensor([x], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # CP: the worst rank's error is the error
    return t.item()


def one_check(a, ctx, impl, dtype, causal, layout) -> dict:
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    q, k, v, w = whole(a, a.seq, dtype, dev, a.seed)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = A.reference(*full, causal=causal)                 # one process, the whole sequence
    (ref * w).sum().backward()
    mine = lambda t: sharding.shard(t, rank, world, layout)  # noqa: E731 -- CP: this rank's part
    local = [mine(t).requires_grad_() for t in (q, k, v)]
    stats = {}
    out = attend(impl, causal, layout, stats)(*local)
    (out * mine(w)).sum().backward()
    grad_err = max((l.grad - mine(f.grad)).abs().max().item() for l, f in zip(local, full))
    size = torch.finfo(dtype).bits // 8
    shape = (a.batch, a.heads, a.seq, a.head_dim, world, size)
    formula = (ring if impl == "course" else ulysses).bytes_formula(*shape)
    return {"impl": impl, "dtype": str(dtype).split(".")[-1], "causal": causal, "layout": layout,
            "out_err": max_over_ranks((out - mine(ref)).abs().max().item(), dev),
            "grad_err": max_over_ranks(grad_err, dev),
            "blocks": stats.get("blocks"), "blocks_computed": stats.get("blocks_computed"),
            "blocks_formula": (ring.blocks_formula(world, layout, causal, a.seq)[rank]
                               if impl == "course" else None),
            "bytes_forward": stats["bytes_sent_forward"], "bytes_backward": stats["bytes_sent_backward"],
            "formula_forward": formula["forward"], "formula_backward": formula["backward"],
            "messages": stats["messages"]}


def checks(a, ctx) -> list[dict]:
    rows = []
    for dtype in (torch.float64, torch.float32):
        for causal in (False, True):
            for layout in a.layouts:
                if "course" in a.impl:
                    rows.append(one_check(a, ctx, "course", dtype, causal, layout))
            if "ulysses" in a.impl:  # Ulysses takes contiguous shards
                rows.append(one_check(a, ctx, "ulysses", dtype, causal, "contiguous"))
    return rows


def torch_checks(a, ctx) -> list[dict]:
    """torch's context_parallel on both masks: what it computed, its collectives, or its error."""
    q, k, v, _ = whole(a, a.seq, torch.float32, ctx.device, a.seed)
    return [torch_cp.run(q, k, v, causal=c) for c in (False, True)] if "torch" in a.impl else []


def memory_sweep(a, ctx) -> list[dict]:
    """Peak bytes per rank for each length: the ring on this rank's shard; rank 0 also the whole
    sequence on one process (one rank measures at a time: the others wait at a barrier)."""
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    rows = []
    for seq in a.mem_seqs:
        q, k, v, w = whole(a, seq, torch.float32, dev, a.seed)
        shape = (a.batch, a.heads, seq, a.head_dim)
        if rank == 0:
            got = M.measure(M.pass_of(lambda *t: A.reference(*t, causal=False), q, k, v, w), dev)
            rows.append(M.row("one process", 1, seq, got, M.formula(*shape, 1, 4)))
        dist.barrier()
        mine = [sharding.shard(t, rank, world, "contiguous") for t in (q, k, v, w)]
        got = M.measure(M.pass_of(attend("course", False, "contiguous"), *mine), dev)
        rows.append(M.row("course ring", world, seq, got, M.formula(*shape, world, 4, ring=True)))
    return rows


def timed(a, ctx, causal: bool, torch_ok: bool, only_torch: bool = False) -> dict:
    """ms of forward+backward per implementation (the slowest rank's, every run), alternated;
    the one-process forms on rank 0 alone."""
    rank, world, dev = ctx.rank, ctx.world_size, ctx.device
    q, k, v, w = whole(a, a.seq, torch.float32, dev, a.seed)
    mine = [sharding.shard(t, rank, world, "zigzag" if causal and "zigzag" in a.layouts
                           else "contiguous") for t in (q, k, v, w)]
    layout = "zigzag" if causal and "zigzag" in a.layouts else "contiguous"
    alone = {"one process": M.pass_of(lambda *t: A.reference(*t, causal=causal), q, k, v, w),
             "one process (fused SDPA)": M.pass_of(
                 lambda *t: F.scaled_dot_product_attention(*t, is_causal=causal), q, k, v, w)}
    runs = {name: (lambda fn=fn: fn() if rank == 0 else None) for name, fn in alone.items()}
    if "course" in a.impl:
        runs[f"course ring ({layout})"] = M.pass_of(attend("course", causal, layout), *mine)
    if "ulysses" in a.impl:
        cont = [sharding.shard(t, rank, world, "contiguous") for t in (q, k, v, w)]
        runs["ulysses"] = M.pass_of(attend("ulysses", causal, "contiguous"), *cont)
    if only_torch:
        runs = {}
    if torch_ok:  # its time includes torch's sharding of q, k, v and unsharding of the output
        mesh = torch_cp._mesh(dev)
        runs["torch context_parallel"] = lambda: torch_cp.sharded_sdpa(q, k, v, causal, mesh, None)
    times = {name: [] for name in runs}
    for i in range(a.iters + 1):
        for name, fn in runs.items():
            dist.barrier()
            synchronize(dev)
            t = time.perf_counter()
            fn()
            synchronize(dev)
            ms = max_over_ranks((time.perf_counter() - t) * 1e3, dev)
            if i:  # the first run warms up
                times[name].append(ms)
    return {"causal": causal, "ms": times}


def run(a, ctx) -> dict:
    """Every part in turn (seconds each in `phase_s`). torch's context_parallel comes last: on the
    CPU, after its causal call raised, the course's causal ring gave wrong answers in the same
    process (seen in torch 2.14), so nothing of the course runs after it."""
    phase, t = {}, time.perf_counter()

    def done(name):
        nonlocal t
        phase[name], t = time.perf_counter() - t, time.perf_counter()
    rows = checks(a, ctx)
    done("checks")
    times = [timed(a, ctx, c, False) for c in (False, True)]
    done("times")
    mem = memory_sweep(a, ctx)
    done("memory")
    torch_rows = torch_checks(a, ctx)
    works = [r["causal"] for r in torch_rows if r["status"] == "ran" and not r["backward_error"]]
    for tm in times:
        if tm["causal"] in works:
            tm["ms"].update(timed(a, ctx, tm["causal"], True, only_torch=True)["ms"])
    done("torch")
    if ctx.rank == 0:
        summary(rows, torch_rows, mem, times, ctx)
    return dict(checks=rows, torch=torch_rows, memory=mem, times=times, memory_how=M.measure.__doc__,
                hardware=hardware_label(ctx.device), batch=a.batch, heads=a.heads, seq=a.seq,
                head_dim=a.head_dim, iters=a.iters, phase_s=phase)


def summary(rows, torch_rows, mem, times, ctx) -> None:
    print(f"# ring attention on {ctx.world_size} rank(s), {hardware_label(ctx.device)}")
    for r in rows:
        print(f"{r['impl']:>8} {r['dtype']} {'causal' if r['causal'] else 'full  '} {r['layout']:>10}: "
              f"out err {r['out_err']:.1e}, grad err {r['grad_err']:.1e}; rank 0 blocks "
              f"{r['blocks'] if r['blocks'] is None else round(r['blocks'], 3)} (formula "
              f"{r['blocks_formula'] if r['blocks_formula'] is None else round(r['blocks_formula'], 3)}), "
              f"bytes fwd/bwd {r['bytes_forward']}/{r['bytes_backward']} (formula "
              f"{r['formula_forward']}/{r['formula_backward']})")
    for r in torch_rows:
        print(torch_cp.describe(r))
    for r in mem:
        print(f"memory {r['impl']:>12} ranks={r['ranks']} seq={r['seq']}: peak {r['peak_bytes']:,} B "
              f"(formula {r['formula_bytes']:,} B, {r['dominant']} term dominates)")
    for t in times:
        print(f"fwd+bwd ms ({'causal' if t['causal'] else 'non-causal'}, {hardware_label(ctx.device)}): "
              + ", ".join(f"{n} fastest {min(v):.1f}" for n, v in t["ms"].items()))


def main(argv=None) -> int:
    a = parse_args(argv)
    with ddist.session() as ctx:  # CP: torchrun / srun variables -> process group
        if not dist.is_initialized():  # plain python: a group of one, so the collectives run
            dist.init_process_group(backend(ctx.device), store=dist.HashStore(), rank=0, world_size=1)
        ddist.report(**run(a, ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
