"""Lab 06 (pipeline parallelism): a stack of residual MLP blocks cut into one stage per rank, run
by torch.distributed.pipelining with the GPipe and 1F1B schedules on m micro-batches.

First each schedule is checked against the whole model on one process (every rank also builds
the whole model from the same seed): the mean micro-batch loss and every stage's gradients.
Then each (schedule, m) is timed, all of them interleaved in rounds (one step of each per round,
the order rotated): every forward and backward of every micro-batch on every stage
is recorded (start, end), and rank 0 reports the records, the measured bubble
1 - busy/span beside the formula (p-1)/(m+p-1), and the most micro-batches a stage held at once.
The micro-batch size is fixed, so each micro-batch costs the same whatever m is.

Launch forms (run in this lab's folder):
    python pipeline.py --tiny                                 # 1 stage: no pipeline, no bubble
    torchrun --nproc-per-node 2 pipeline.py --tiny            # 2 stages
    torchrun --nproc-per-node 4 pipeline.py --microbatches 4,8,16   # 4 stages
    srun --ntasks 2 python pipeline.py --tiny                 # Slurm: one task per stage
From a notebook: dltutor.model_parallel.runs.run_pipeline(nproc=2, microbatches=[...]).
"""
from __future__ import annotations

import statistics
import sys

import torch
import torch.distributed as dist  # PP:

from dltutor.core import dist as ddist
from dltutor.core import flags
from dltutor.core.rounds import rotated
from dltutor.core.device import backend, hardware_label
from dltutor.model_parallel import pipeline as P


def counts(text) -> list[int]:
    """A comma-separated list of positive integers, e.g. '1,2,4,8'."""
    return [flags.positive_int(t) for t in str(text).split(",") if t.strip()]


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--d-model", type=flags.positive_int, default=512, help="model width")
    p.add_argument("--hidden", type=flags.positive_int, default=1024, help="MLP hidden width")
    p.add_argument("--blocks-per-stage", type=flags.positive_int, default=2, help="blocks on each rank")
    p.add_argument("--mb-size", type=flags.positive_int, default=32, help="rows per micro-batch")
    p.add_argument("--microbatches", type=counts, default="1,2,4,8",
                   help="micro-batch counts m to time (1F1B needs m >= stages)")
    p.add_argument("--schedules", type=flags.choice_list(tuple(P.SCHEDULES)), default="gpipe,1f1b",
                   help="schedules to check and time")
    p.add_argument("--check-microbatches", type=flags.positive_int, default=4,
                   help="m of the equivalence check against the whole model (at least the stages)")
    p.add_argument("--steps", type=flags.positive_int, default=3,
                   help="timed steps per (schedule, m), the schedules interleaved step by step")
    p.add_argument("--work", choices=["compute", "sleep"], default="compute",
                   help="what a stage spends its time on: the blocks' real compute, or the blocks "
                        "plus a fixed sleep (a labelled stand-in that needs no CPU)")
    p.add_argument("--sleep-ms", type=flags.positive_float, default=20.0,
                   help="with --work sleep: forward wait per micro-batch (backward waits twice it)")
    p.add_argument("--seed", type=flags.nonnegative_int, default=0, help="same on every rank")
    flags.add_tiny(p, {"d_model": 32, "hidden": 64, "mb_size": 4, "microbatches": [2, 4], "steps": 1})
    return flags.parse(p, argv)


def work_label(a) -> str:
    if a.work == "sleep":
        return f"SLEEP stand-in {a.sleep_ms:g} ms forward / {2 * a.sleep_ms:g} ms backward + blocks"
    return "real compute (blocks)"


def stage_setup(a, ctx):
    """The whole model (same seed everywhere) and this rank's stage of it."""
    blocks = a.blocks_per_stage * ctx.world_size
    torch.manual_seed(a.seed)
    whole = P.build_model(a.d_model, a.hidden, blocks).to(ctx.device)
    cut = P.stage_slice(blocks, ctx.world_size, ctx.rank)
    module = torch.nn.Sequential(*whole[cut]).to(ctx.device)   # PP: this rank's blocks
    part = P.build_model(a.d_model, a.hidden, cut.stop - cut.start).to(ctx.device)
    part.load_state_dict(module.state_dict())                   # a copy the stage trains
    if a.work == "sleep":                                       # the STAND-IN, labelled in reports
        part.append(P.SleepWork(a.sleep_ms))
    return whole, module, part


def batch(a, m, dev, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m * a.mb_size, a.d_model, generator=g).to(dev)
    return x, torch.randn(m * a.mb_size, a.d_model, generator=g).to(dev)


def check(name, a, ctx, whole, ref_blocks, part) -> dict:
    m = max(a.check_microbatches, ctx.world_size)  # 1F1B needs m >= stages
    x, y = batch(a, m, ctx.device, a.seed + 1)
    ref_loss = P.reference_step(whole, x, y, P.mse)
    part.zero_grad(set_to_none=True)
    stage = P.TimedStage(part, ctx.rank, ctx.world_size, ctx.device)   # PP:
    sched = P.make_schedule(name, stage, m, P.mse)                     # PP:
    losses = P.run_step(sched, stage, x, y, ctx.rank == 0, ctx.rank == ctx.world_size - 1)
    errs = [None] * ctx.world_size
    dist.all_gather_object(errs, P.grad_error(part, ref_blocks))      # PP:
    loss = statistics.fmean(losses) if losses else None
    return {"schedule": name, "m": m, "ref_loss": ref_loss, "pipeline_loss": loss,
            "loss_err": abs(loss - ref_loss) if losses else None, "grad_err": max(errs)}


def timed(names, m, a, ctx, part) -> list[dict]:
    """The schedules in `names` at one m, interleaved (`timed_all` with one m)."""
    return timed_all({m: names}, a, ctx, part)


def timed_all(plan, a, ctx, part) -> list[dict]:
    """Every (schedule, m) of `plan` ({m: schedule names}) INTERLEAVED: round i runs one step of
    each m, the m's in rotated order, and at each m one step of each schedule, rotated too
    (dltutor.core.rounds), so a slow spell of the machine hits every m and every schedule; step i
    of each is round i's, a pair with any other's. Per (schedule, m): every step's bubble, span
    and overlap, and the median-bubble step's events."""
    kit = {(n, m): P.TimedStage(part, ctx.rank, ctx.world_size, ctx.device)        # PP:
           for m, names in plan.items() for n in names}
    scheds = {(n, m): P.make_schedule(n, kit[n, m], m, P.mse) for n, m in kit}      # PP:
    data = {m: batch(a, m, ctx.device, a.seed + 2) for m in plan}
    steps = {key: [] for key in kit}
    for i in range(a.steps + 1):                                       # round 0 warms up
        for m in rotated(list(plan), i):
            x, y = data[m]
            for n in rotated(plan[m], i):
                stage = kit[n, m]
                part.zero_grad(set_to_none=True)
                dist.barrier()                                         # PP: one start line
                stage.start_clock()
                P.run_step(scheds[n, m], stage, x, y, ctx.rank == 0, ctx.rank == ctx.world_size - 1)
                events = [None] * ctx.world_size
                dist.all_gather_object(events, stage.events)           # PP:
                if i:
                    steps[n, m].append(events)
    return [dict(summary(n, m, ctx.world_size, steps[n, m]), m_in_rounds=len(plan) > 1)
            for m, names in plan.items() for n in names]


def summary(name, m, p, steps) -> dict:
    """One (schedule, m): per-step bubble, span, overlap and idle; the median-bubble step's records."""
    bubbles = [P.measured_bubble(ev) for ev in steps]
    mid = steps[bubbles.index(statistics.median_low(bubbles))]
    start, end = P.step_span(mid)
    shares = [P.busy_shares(ev) for ev in steps]
    return {"schedule": name, "m": m, "stages": p,
            "bubble": statistics.median_low(bubbles), "bubbles": bubbles,
            "formula": P.bubble_formula(p, m), "step_s": end - start,
            "steps_s": [P.step_span(ev)[1] - P.step_span(ev)[0] for ev in steps],
            "overlaps": [s[0] for s in shares], "idles": [s[1] for s in shares],
            "in_flight": [P.max_in_flight(ev) for ev in mid], "mean_s": P.mean_times(mid),
            "steps_mean_s": [P.mean_times(ev) for ev in steps], "events": mid}


def run(a, ctx) -> dict:
    """Checks, then timings, on the process group `ctx` belongs to; returns the metrics."""
    whole, ref_blocks, part = stage_setup(a, ctx)
    checks = [check(name, a, ctx, whole, ref_blocks, part) for name in a.schedules]
    plan, skipped = {}, []
    for m in a.microbatches:                    # every m and schedule interleaved, in rounds
        plan[m] = [n for n in a.schedules if not (n == "1f1b" and m < ctx.world_size)]
        skipped += [f"1f1b with m={m} < {ctx.world_size} stages (torch refuses it)"
                    for n in a.schedules if n not in plan[m]]
    runs = timed_all(plan, a, ctx, part)
    runs.sort(key=lambda r: a.schedules.index(r["schedule"]))    # GPipe rows first, m in order
    if ctx.rank == ctx.world_size - 1:
        for c in checks:
            print(f"check {c['schedule']:>5} m={c['m']}: loss {c['pipeline_loss']:.6f} vs whole "
                  f"model {c['ref_loss']:.6f}, max grad err {c['grad_err']:.1e}")
    if ctx.rank == 0:
        print(f"# pipeline on {ctx.world_size} stage(s), {hardware_label(ctx.device)}, stage work: "
              f"{work_label(a)}")
        for r in runs:
            print(f"{r['schedule']:>5} m={r['m']:<3} bubble {r['bubble']:.3f} (formula "
                  f"{r['formula']:.3f}), step {r['step_s'] * 1e3:.1f} ms, in flight {r['in_flight']}")
        for s in skipped:
            print("skipped:", s)
    return dict(checks=checks, runs=runs if ctx.rank == 0 else [], skipped=skipped,
                hardware=hardware_label(ctx.device), d_model=a.d_model, hidden=a.hidden,
                blocks_per_stage=a.blocks_per_stage, mb_size=a.mb_size, work=work_label(a))


def main(argv=None) -> int:
    a = parse_args(argv)
    with ddist.session() as ctx:  # PP: torchrun / srun variables -> process group
        if not dist.is_initialized():  # plain python: a group of one (one stage)
            dist.init_process_group(backend(ctx.device), store=dist.HashStore(), rank=0, world_size=1)
        ddist.report(**run(a, ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
