"""Inside lab 09's moe.py ranks: the layer the lab trains (the course's expert-parallel MoE, or
DeepSpeed's) behind one small interface, and the measurements made after training.

    layer = make_layer(args, ctx)       .module (an nn.Module), .aux_loss(), .step_stats(), .describe()
    skew_sweep(layer, probe, args, ctx) per (skew, capacity factor): dropped fraction, rows each
                                        rank's experts got, expert and all-to-all times
    token_sweep(layer, probe, args, ctx) per token count: all-to-all bytes and time (alpha-beta points)

Every number is this rank's; the kernel (dltutor.experts.runs) puts the ranks side by side.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from dltutor.core.device import backend, synchronize
from dltutor.experts.layer import MoE
from dltutor.experts.parallel import ExpertParallelMoE

NO_CAP = "none"   # the capacity factor of a sweep point without a limit (nothing dropped)


def is_expert(name: str, param) -> bool:
    """An expert's parameter (owned by one rank), not a replicated one. The course's EP layer keeps
    its experts under `experts.`; DeepSpeed marks its expert parameters allreduce=False."""
    return ".experts." in f".{name}" or getattr(param, "allreduce", True) is False


def group_of_one(dev) -> None:
    """Plain `python moe.py`: a process group of one, so the same expert-parallel code runs."""
    if not dist.is_initialized():
        dist.init_process_group(backend(dev), store=dist.HashStore(), rank=0, world_size=1)


class CourseLayer:
    """dltutor.experts.parallel.ExpertParallelMoE built from layer.MoE(seed) with expert 0's
    router logit biased by `skew`."""

    def __init__(self, a, ctx):
        group_of_one(ctx.device)
        self.reference = MoE(a.d_model, a.hidden, a.experts, a.top_k, a.capacity_factor, seed=a.seed)
        self.reference.logit_bias[0] = a.skew
        self.module = ExpertParallelMoE.from_moe(self.reference.to(ctx.device))   # EP: my experts

    def aux_loss(self):
        return self.module.last_routing.aux_loss

    def step_stats(self) -> dict:
        r, s = self.module.last_routing, self.module.last_stats
        return {"load": r.load.tolist(), "kept_load": r.kept_load.tolist(),
                "dropped_fraction": r.dropped_fraction, "capacity": r.capacity,
                **{k: s[k] for k in ("tokens_sent", "tokens_received", "expert_rows", "bytes_sent",
                                     "alltoall_s", "experts_s", "counts_s")}}

    def describe(self) -> dict:
        return {"layer": "dltutor.experts.parallel.ExpertParallelMoE", "min_capacity": 0,
                "second_expert": "the second largest probability",
                "drop_order": "first come, first served in token order",
                "capacity_formula": "ceil(tokens * k * cf / E)"}

    def set(self, skew: float, capacity_factor) -> None:
        self.module.logit_bias[0] = skew
        self.module.capacity_factor = capacity_factor


def make_layer(a, ctx):
    if a.impl == "deepspeed":
        from dltutor.experts.deepspeed_moe import DeepSpeedLayer
        group_of_one(ctx.device)
        course = MoE(a.d_model, a.hidden, a.experts, a.top_k, a.capacity_factor, seed=a.seed)
        return DeepSpeedLayer(course.to(ctx.device), ctx, a.capacity_factor)
    return CourseLayer(a, ctx)


@torch.no_grad()
def timed_forward(layer, x, dev) -> dict:
    """One forward of the layer alone on `x`: its stats and its wall time (s)."""
    synchronize(dev)
    t0 = time.perf_counter()
    layer.module(x)
    synchronize(dev)
    return {**layer.step_stats(), "forward_s": time.perf_counter() - t0}


def my_share(probe, ctx):
    return probe.chunk(ctx.world_size)[ctx.rank]


def skew_sweep(layer, probe, a, ctx) -> list[dict]:
    """Each (skew, capacity factor) point, plus one without a capacity limit per skew: `repeats`
    forwards of this rank's share of `probe` (the trained model's tokens of the test images)."""
    x, out = my_share(probe, ctx), []
    keep = (float(layer.module.logit_bias[0]), layer.module.capacity_factor)
    for skew in a.sweep_skews:
        for cf in [None, *a.sweep_capacity]:
            layer.set(skew, cf)
            runs = [timed_forward(layer, x, ctx.device) for _ in range(a.repeats)]
            out.append({"skew": skew, "capacity_factor": NO_CAP if cf is None else cf,
                        "tokens": x.shape[0], **_summary(runs)})
    layer.set(*keep)
    return out


def _summary(runs: list[dict]) -> dict:
    """Routing is the same in every repeat (no grad, same input): counts from the first, times
    from all."""
    first = runs[0]
    return {k: first[k] for k in ("load", "kept_load", "dropped_fraction", "capacity", "expert_rows",
                                  "tokens_sent", "tokens_received", "bytes_sent")} | {
        "experts_s": [r["experts_s"] for r in runs], "alltoall_s": [r["alltoall_s"] for r in runs],
        "forward_s": [r["forward_s"] for r in runs]}


def token_sweep(layer, probe, a, ctx) -> list[dict]:
    """All-to-all bytes and times at several token counts per rank (the trained routing, no
    skew): the points the alpha-beta fit is made from."""
    x, out = my_share(probe, ctx), []
    keep = (float(layer.module.logit_bias[0]), layer.module.capacity_factor)
    layer.set(0.0, keep[1])
    for n in a.sweep_tokens:
        n = int(n)
        rows = x.repeat((n + x.shape[0] - 1) // x.shape[0], 1)[:n]
        timed_forward(layer, rows, ctx.device)                     # warm-up, not kept
        runs = [timed_forward(layer, rows, ctx.device) for _ in range(a.repeats)]
        out.append({"tokens": n, **_summary(runs)})
    layer.set(*keep)
    return out
