"""Expert parallelism: the experts of one MoE layer split over the ranks, tokens sent to them.

Rank r of P owns experts r*E/P ... (r+1)*E/P - 1; the gate is replicated (each rank routes its own
tokens, so its gradient is a partial sum: all-reduce it as DDP does, `allreduce_gate_grads`).
One forward, on every rank:

  1. route    this rank's tokens (gating.route: capacity counted on the rank's own tokens, as
              Megatron-LM does, so P ranks equal layer.MoE.forward(all tokens, groups=P));
  2. counts   sort the kept slots by expert and exchange how many go to each expert
              (dist.all_to_all_single of int64 counts, E/P per rank): now every rank knows how many
              rows it will receive from each rank (its `counts_matrix`). On a GPU this is the
              device-to-host sync torchtitan points out: the split sizes must be Python ints;
  3. dispatch all_to_all_single_autograd(rows, output_split_sizes=received, input_split_sizes=sent);
  4. experts  the received rows regrouped by local expert, each expert run once on its rows
              (an expert with no row is skipped);
  5. combine  the all-to-all back, splits swapped (the backward of 3 is the same swap), then each
              row weighted and added into its token's place: tokens come back in their original order.

Both all-to-alls are differentiable (torch.distributed._functional_collectives), so the backward
sends the gradients the other way. Every rank must join both backward all-to-alls even when it
routes or receives no row: the dispatched rows are made part of the graph on every rank.
"""
from __future__ import annotations

import copy
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn as nn

from dltutor.core.device import synchronize
from dltutor.experts import gating


def _ready(t):
    """The result of a functional collective, waited for (so a clock read after it is honest)."""
    return t.wait() if hasattr(t, "wait") else t


def experts_of(rank: int, world_size: int, num_experts: int) -> range:
    """The experts rank `rank` owns."""
    if num_experts % world_size:
        raise ValueError(f"{num_experts} experts cannot be split evenly over {world_size} ranks; "
                         "use a number of experts divisible by the number of ranks.")
    per = num_experts // world_size
    return range(rank * per, (rank + 1) * per)


def sort_by_expert(routing: gating.Routing):
    """The kept slots in expert order: (token index, weight, expert) per slot, and counts [E]."""
    token, slot = torch.nonzero(routing.kept, as_tuple=True)
    expert = routing.experts[token, slot]
    order = torch.argsort(expert, stable=True)
    token, slot, expert = token[order], slot[order], expert[order]
    counts = torch.bincount(expert, minlength=routing.load.numel())
    return token, routing.weights[token, slot], counts


def exchange_counts(counts: torch.Tensor, world_size: int, group) -> torch.Tensor:
    """counts [E] slots this rank sends to each expert -> [P, E/P]: row s = what rank s sends to
    each of this rank's experts."""
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts.contiguous(), group=group)   # equal splits: E/P each
    return received.view(world_size, -1)


def run_local_experts(experts: nn.ModuleList, rows: torch.Tensor, counts_matrix: torch.Tensor):
    """rows arrive grouped by source rank, then by expert; regroup by expert, run, put back."""
    per = len(experts)
    expert_of_row = torch.arange(per, device=rows.device).repeat(counts_matrix.shape[0])
    expert_of_row = expert_of_row.repeat_interleave(counts_matrix.reshape(-1))
    order = torch.argsort(expert_of_row, stable=True)
    chunks = rows[order].split(counts_matrix.sum(0).tolist())
    out = torch.cat([e(c) if c.shape[0] else c for e, c in zip(experts, chunks)])
    return out[torch.argsort(order)]


def dispatch(rows, sent: list[int], received: list[int], group):
    """Send each rank its rows: `sent[s]` rows go to rank s, `received[s]` arrive from rank s."""
    return _ready(fc.all_to_all_single_autograd(rows, received, sent, group))


def combine(out, sent: list[int], received: list[int], group):
    """The expert outputs back to the ranks the rows came from: dispatch with the splits swapped."""
    return _ready(fc.all_to_all_single_autograd(out, sent, received, group))


def unpermute(x, token, weight, back):
    """y[t] = sum of token t's weighted expert outputs: rows back in their tokens' places."""
    return torch.zeros_like(x).index_add(0, token, weight.unsqueeze(1).to(back.dtype) * back)


class ExpertParallelMoE(nn.Module):
    """Build with `ExpertParallelMoE.from_moe(moe, group)` on every rank of `group`."""

    def __init__(self, gate, experts, logit_bias, num_experts: int, top_k: int,
                 capacity_factor, group=None):
        super().__init__()
        self.group = group if group is not None else dist.group.WORLD
        self.rank, self.world_size = dist.get_rank(self.group), dist.get_world_size(self.group)
        self.owned = experts_of(self.rank, self.world_size, num_experts)
        self.gate, self.experts = gate, experts
        self.register_buffer("logit_bias", logit_bias)
        self.num_experts, self.top_k, self.capacity_factor = num_experts, top_k, capacity_factor
        self.last_routing, self.last_stats = None, {}

    @classmethod
    def from_moe(cls, moe, group=None) -> "ExpertParallelMoE":
        """The same parameters as `moe` (copied), this rank keeping only its own experts."""
        g = group if group is not None else dist.group.WORLD
        owned = experts_of(dist.get_rank(g), dist.get_world_size(g), moe.num_experts)
        experts = nn.ModuleList(copy.deepcopy(moe.experts[i]) for i in owned)
        return cls(copy.deepcopy(moe.gate), experts, moe.logit_bias.clone(), moe.num_experts,
                   moe.top_k, moe.capacity_factor, group)

    def forward(self, x):
        dev = x.device
        r = self.last_routing = gating.route(self.gate(x) + self.logit_bias.to(x.dtype),
                                             self.top_k, self.capacity_factor)
        token, weight, counts = sort_by_expert(r)
        synchronize(dev)
        t0 = time.perf_counter()
        matrix = exchange_counts(counts, self.world_size, self.group)
        sent = counts.view(self.world_size, -1).sum(1).tolist()
        received = matrix.sum(1).tolist()                     # Python ints: a sync on a GPU
        rows = x[token]
        if torch.is_grad_enabled() and not rows.requires_grad:
            rows = rows.detach().requires_grad_()             # every rank joins the backward
        t1 = time.perf_counter()
        rows = dispatch(rows, sent, received, self.group)
        synchronize(dev)
        t2 = time.perf_counter()
        out = run_local_experts(self.experts, rows, matrix)
        synchronize(dev)
        t3 = time.perf_counter()
        back = combine(out, sent, received, self.group)
        synchronize(dev)
        t4 = time.perf_counter()
        y = unpermute(x, token, weight, back)
        self.last_stats = self.stats(x, sent, received, matrix,
                                     counts_s=t1 - t0, alltoall_s=(t2 - t1) + (t4 - t3), experts_s=t3 - t2,
                                     in_backward=bool(back.requires_grad))
        return y

    def stats(self, x, sent, received, matrix, **times) -> dict:
        row_bytes = x.shape[1] * x.element_size()
        others_sent = sum(sent) - sent[self.rank]
        others_received = sum(received) - received[self.rank]
        return dict(tokens_sent=others_sent, tokens_received=others_received,
                    tokens_local=sent[self.rank], expert_rows=sum(received),
                    bytes_sent=(others_sent + others_received) * row_bytes,
                    bytes_dispatch=others_sent * row_bytes, bytes_combine=others_received * row_bytes,
                    counts_matrix=matrix.tolist(), split_sent=sent, split_received=received, **times)

    def allreduce_gate_grads(self, average: bool = False) -> None:
        """DDP for the replicated gate: sum (or average) its gradient over the ranks."""
        for p in self.gate.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad, group=self.group)
                if average:
                    p.grad /= self.world_size
