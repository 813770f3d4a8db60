"""DeepSpeed's MoE layer (`deepspeed.moe.layer.MoE`, ep_size = the ranks) beside the course's.

`DeepSpeedLayer(course_moe, ctx, capacity_factor)` builds DeepSpeed's layer with the course
layer's sizes, experts and gate weights copied in (so both start from the same parameters), and
reports per forward what the course's layer reports: load (DeepSpeed's exp_counts: slots routed
per expert, before drops), the dropped fraction, rows sent and received, all-to-all time, and its
l_aux. What differs from the course's layer (dltutor.experts.gating), read in deepspeed/moe/
sharded_moe.py (0.19.8):

- capacity: max(ceil(tokens/E * capacity_factor * k), min_capacity) (min_capacity=4 by default);
  the course: ceil(tokens * k * capacity_factor / E), no floor.
- drop order (top-2): every token's FIRST choice takes a slot before any second choice; the course
  keeps slots first come, first served in token order.
- the second expert: chosen after Gumbel noise is added to the logits (top2_2nd_expert_sampling,
  on by default); the course takes the two largest probabilities. noisy_gate_policy ('Jitter',
  'RSample') and Random Token Selection (use_rts) exist for top-1 only.
- l_aux: E * sum_e mean(gates_e) * (fraction of tokens whose FIRST choice is e): the Switch loss
  on the top-1 mask; the course counts every one of the k slots (Megatron-LM's form).
- all-to-all: a dense [E, capacity, d_model] buffer is exchanged whatever the load (empty slots
  travel as zeros); the course sends only the rows routed, after exchanging counts.
"""
from __future__ import annotations

import copy
import math
import time

import torch

MIN_CAPACITY = 4  # deepspeed.moe.layer.MoE's default


def ds_capacity(tokens: int, num_experts: int, top_k: int, capacity_factor: float,
                min_capacity: int = MIN_CAPACITY) -> int:
    """DeepSpeed's slots per expert for top-1/top-2 (sharded_moe._capacity with factor * k)."""
    return max(math.ceil(tokens / num_experts * capacity_factor * top_k), min_capacity)


def course_capacity(tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    """The course's slots per expert (dltutor.experts.gating.capacity, Megatron-LM's formula)."""
    return math.ceil(tokens * top_k * capacity_factor / num_experts)


def build(course_moe, world_size: int, capacity_factor: float, min_capacity: int = MIN_CAPACITY):
    """deepspeed.moe.layer.MoE with `course_moe`'s sizes, top-k, expert and gate weights."""
    import deepspeed
    from deepspeed.moe.layer import MoE as DSMoE
    if not deepspeed.comm.is_initialized():
        deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())  # reuses the group
    E, P = course_moe.num_experts, world_size
    layer = DSMoE(course_moe.d_model, copy.deepcopy(course_moe.experts[0]), num_experts=E, ep_size=P,
                  k=course_moe.top_k, capacity_factor=capacity_factor,
                  eval_capacity_factor=capacity_factor, min_capacity=min_capacity)
    layer.set_deepspeed_parallelism()         # EP: DeepSpeed's expert-parallel process groups
    rank = torch.distributed.get_rank() if P > 1 else 0
    local = E // P
    with torch.no_grad():
        layer.deepspeed_moe.gate.wg.weight.copy_(course_moe.gate.weight)
        for i, ds_expert in enumerate(layer.deepspeed_moe.experts.deepspeed_experts):
            ds_expert.load_state_dict(course_moe.experts[rank * local + i].state_dict())
    return layer


class DeepSpeedLayer:
    """The adapter the lab trains: `.module(x) -> y`, `.aux_loss()`, `.step_stats()`, `.describe()`."""

    def __init__(self, course_moe, ctx, capacity_factor: float, min_capacity: int = MIN_CAPACITY):
        self.ctx, self.top_k, self.num_experts = ctx, course_moe.top_k, course_moe.num_experts
        self.capacity_factor, self.min_capacity = capacity_factor, min_capacity
        self.ds = build(course_moe, ctx.world_size, capacity_factor, min_capacity)
        self.ds.deepspeed_moe.wall_clock_breakdown = True   # its own all-to-all timers (ms)
        self.routes = None
        self.ds.deepspeed_moe.gate.register_forward_hook(self._keep_routes)
        self.module = _Forward(self)

    def _keep_routes(self, _module, _inputs, out):
        """TopKGate's sparse output: (l_aux, capacity, E, indices [k, S] (-1: dropped), ...)."""
        self.routes = out

    def aux_loss(self):
        return self.l_aux

    def step_stats(self) -> dict:
        l_aux, cap, E, indices, *_rest, exp_counts = self.routes
        cap, P = int(cap), self.ctx.world_size
        k, S = indices.shape
        kept = torch.bincount(indices[indices >= 0].long().reshape(-1), minlength=E)
        rows = E * cap                                   # the dense buffer, every slot
        moe = self.ds.deepspeed_moe
        return {"load": exp_counts.tolist(), "kept_load": kept.tolist(),
                "dropped_fraction": float((indices < 0).sum().item()) / (k * S),
                "capacity": cap, "tokens_sent": rows * (P - 1) // P, "tokens_received": rows * (P - 1) // P,
                "rows_for_local_experts": rows // P * P if P > 1 else rows,
                "bytes_sent": rows * (P - 1) // P * self.ds_width() * 4,
                "alltoall_s": (moe.time_falltoall + moe.time_salltoall) / 1e3,
                "layer_s": self.forward_s}

    def ds_width(self) -> int:
        return self.ds.deepspeed_moe.gate.wg.weight.shape[1]

    def describe(self) -> dict:
        return {"layer": "deepspeed.moe.layer.MoE", "min_capacity": self.min_capacity,
                "second_expert": "Gumbel-sampled (top2_2nd_expert_sampling=True, DeepSpeed's default)",
                "drop_order": "first choices before second choices",
                "capacity_formula": "max(ceil(tokens/E * cf * k), min_capacity)"}


class _Forward(torch.nn.Module):
    """What the model calls: DeepSpeed's layer, its l_aux kept, its time taken."""

    def __init__(self, owner: DeepSpeedLayer):
        super().__init__()
        self.owner = [owner]          # a list: not registered as a submodule twice
        self.ds = owner.ds

    def forward(self, x):
        owner = self.owner[0]
        t0 = time.perf_counter()
        y, owner.l_aux, _counts = self.ds(x)
        owner.forward_s = time.perf_counter() - t0
        return y


def expert_names(model) -> set[str]:
    """Names of parameters DeepSpeed marks as expert-parallel (allreduce=False)."""
    return {n for n, p in model.named_parameters() if getattr(p, "allreduce", True) is False}
