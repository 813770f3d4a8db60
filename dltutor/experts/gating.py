"""Top-k gating for a mixture of experts: which experts each token goes to, with what weight,
which slots are dropped for lack of room, and the load-balancing loss.

    probs    = softmax(logits)                      [tokens, experts], one row per token
    experts  = the top_k largest probs of each row  [tokens, top_k] (distinct experts)
    weights  = those probs renormalized to sum to 1 over the k chosen
    capacity = ceil(tokens * top_k * capacity_factor / experts)   Megatron-LM's formula
               (megatron/core/transformer/moe); capacity_factor=None: no limit, nothing dropped.

Drop policy: first come, first served in token order. Token t's slot for expert e is kept when
fewer than `capacity` earlier tokens chose e. (The k experts of one token are distinct, so the
order of the slots inside a token does not matter.) A dropped slot contributes nothing; a token
whose every slot was dropped passes through the layer's residual connection unchanged.

Load-balancing loss (Switch Transformer, Fedus et al. 2021, eq. 4; GShard before it):
    aux_loss = E * sum_e f_e * P_e
    f_e = load_e / (tokens * top_k)   the fraction of routed slots that chose e, before drops
    P_e = mean over tokens of probs[:, e]
It is 1 when routing is uniform and grows towards E as one expert takes everything; its gradient
flows through P (f is a count). With top_k = 1 this is exactly Switch's loss; for top_k > 1 it is
Megatron-LM's switch_load_balancing_loss_func (f normalized by tokens * top_k).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Routing:
    """Where each token goes. T tokens, E experts, k = top_k."""
    experts: torch.Tensor        # [T, k] long: the chosen experts, most probable first
    weights: torch.Tensor        # [T, k]: gate weights, renormalized over the k chosen
    kept: torch.Tensor           # [T, k] bool: False where the slot was dropped (expert full)
    capacity: int | None         # slots per expert, None without a capacity factor
    load: torch.Tensor           # [E] long: slots routed to each expert, before drops
    aux_loss: torch.Tensor       # scalar: E * sum_e f_e * P_e
    dropped_fraction: float      # dropped slots / (T * k)
    probs: torch.Tensor          # [T, E]: softmax(logits)

    @property
    def kept_load(self) -> torch.Tensor:
        """[E] slots each expert actually processes (after drops)."""
        return torch.bincount(self.experts[self.kept], minlength=self.load.numel())


def capacity(tokens: int, num_experts: int, top_k: int, capacity_factor: float | None) -> int | None:
    """Slots per expert: ceil(tokens * top_k * capacity_factor / experts) (Megatron-LM)."""
    if capacity_factor is None:
        return None
    if not capacity_factor > 0:
        raise ValueError(f"capacity_factor must be > 0 (got {capacity_factor}); "
                         "use None for no capacity limit.")
    return math.ceil(tokens * top_k * capacity_factor / num_experts)


def check(num_experts: int, top_k: int) -> None:
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k={top_k} must be between 1 and the number of experts "
                         f"({num_experts}); lower top_k or add experts.")


def first_come_first_served(experts: torch.Tensor, num_experts: int, cap: int | None) -> torch.Tensor:
    """[T, k] bool: a slot is kept when fewer than `cap` earlier slots (token order) chose its expert."""
    if cap is None:
        return torch.ones_like(experts, dtype=torch.bool)
    onehot = F.one_hot(experts.reshape(-1), num_experts)            # [T*k, E], token order
    position = (onehot.cumsum(0) - 1).gather(1, experts.reshape(-1, 1))  # rank within its expert
    return (position < cap).reshape(experts.shape)


def balance_loss(probs: torch.Tensor, load: torch.Tensor, top_k: int) -> torch.Tensor:
    """Switch Transformer's E * sum_e f_e * P_e, f from the counts, P the mean router probability."""
    tokens, num_experts = probs.shape
    f = load.to(probs.dtype) / max(tokens * top_k, 1)
    return num_experts * (f * probs.sum(0) / max(tokens, 1)).sum()   # no token: 0, not nan


def route(logits: torch.Tensor, top_k: int, capacity_factor: float | None = None) -> Routing:
    """Top-k routing of `logits` [tokens, experts]; see the module docstring for every rule."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be [tokens, experts]; got shape {tuple(logits.shape)}.")
    tokens, num_experts = logits.shape
    check(num_experts, top_k)
    cap = capacity(tokens, num_experts, top_k, capacity_factor)
    probs = logits.softmax(-1)
    top_p, experts = probs.topk(top_k, dim=-1)
    weights = top_p / top_p.sum(-1, keepdim=True)
    kept = first_come_first_served(experts, num_experts, cap)
    load = torch.bincount(experts.reshape(-1), minlength=num_experts)
    slots = tokens * top_k
    dropped = float((~kept).sum().item()) / slots if slots else 0.0
    return Routing(experts=experts, weights=weights, kept=kept, capacity=cap, load=load,
                   aux_loss=balance_loss(probs, load, top_k), dropped_fraction=dropped, probs=probs)


def concat(parts: list[Routing]) -> Routing:
    """One Routing for groups routed separately (GShard's local groups, or one per rank): rows
    stacked in order, loads summed, aux losses averaged, the dropped fraction over all slots;
    capacity is the groups' common one (None if their sizes, hence capacities, differ)."""
    slots = sum(p.kept.numel() for p in parts)
    dropped = sum(p.dropped_fraction * p.kept.numel() for p in parts) / slots if slots else 0.0
    caps = {p.capacity for p in parts}
    return Routing(experts=torch.cat([p.experts for p in parts]),
                   weights=torch.cat([p.weights for p in parts]),
                   kept=torch.cat([p.kept for p in parts]),
                   capacity=caps.pop() if len(caps) == 1 else None,
                   load=torch.stack([p.load for p in parts]).sum(0),
                   aux_loss=torch.stack([p.aux_loss for p in parts]).mean(),
                   dropped_fraction=dropped, probs=torch.cat([p.probs for p in parts]))
