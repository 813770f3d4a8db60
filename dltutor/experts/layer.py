"""A mixture-of-experts layer in one process: the reference expert parallelism must match.

    logits = gate(x) + logit_bias              gate: Linear d_model -> E (no bias)
    routing = gating.route(logits, top_k, capacity_factor)
    y[t] = sum over token t's kept slots of  weight * expert(x[t])
    expert = Linear(d_model, hidden) -> GELU -> Linear(hidden, d_model)

A dropped slot contributes 0, so a token whose every slot was dropped gets y = 0 here: the
transformer block around the layer adds its residual (x + y), which carries that token on unchanged.
`logit_bias` is a buffer of zeros; setting `moe.logit_bias[0] = b` skews routing towards expert 0
(the notebook's skew experiments). `forward(x, groups=G)` routes G equal blocks of tokens
separately (GShard's local groups: capacity is per block); expert parallelism over P ranks routes
each rank's tokens separately, so it equals groups=P. Without a capacity factor groups change nothing.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from dltutor.experts import gating


class Expert(nn.Module):
    """One expert: a two-layer MLP d_model -> hidden -> d_model with GELU."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.up, self.down = nn.Linear(d_model, hidden), nn.Linear(hidden, d_model)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """Top-k gated experts. Built under `seed` (the global RNG is left as it was), so every
    process that builds MoE(..., seed=s) holds the same parameters."""

    def __init__(self, d_model: int, hidden: int, num_experts: int, top_k: int = 2,
                 capacity_factor: float | None = None, seed: int = 0):
        super().__init__()
        gating.check(num_experts, top_k)
        gating.capacity(1, num_experts, top_k, capacity_factor)  # rejects capacity_factor <= 0
        self.d_model, self.hidden, self.num_experts = d_model, hidden, num_experts
        self.top_k, self.capacity_factor, self.seed = top_k, capacity_factor, seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.gate = nn.Linear(d_model, num_experts, bias=False)
            self.experts = nn.ModuleList(Expert(d_model, hidden) for _ in range(num_experts))
        self.register_buffer("logit_bias", torch.zeros(num_experts))
        self.last_routing: gating.Routing | None = None

    def logits(self, x):
        return self.gate(x) + self.logit_bias.to(x.dtype)

    def route(self, x, groups: int = 1) -> gating.Routing:
        if groups < 1 or x.shape[0] % groups:
            raise ValueError(f"{x.shape[0]} tokens cannot be split into {groups} equal groups; "
                             "choose groups that divide the token count.")
        logits = self.logits(x)
        return gating.concat([gating.route(part, self.top_k, self.capacity_factor)
                              for part in logits.chunk(groups)]) if groups > 1 else \
            gating.route(logits, self.top_k, self.capacity_factor)

    def forward(self, x, groups: int = 1):
        if x.dim() != 2 or x.shape[1] != self.d_model:
            raise ValueError(f"x must be [tokens, {self.d_model}]; got {tuple(x.shape)}.")
        r = self.last_routing = self.route(x, groups)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero((r.experts == e) & r.kept, as_tuple=True)
            if token.numel():
                w = r.weights[token, slot].unsqueeze(1)
                y = y.index_add(0, token, w * expert(x[token]))
        return y

    def active_parameters(self) -> int:
        """Parameters one token uses: the gate and top_k experts (DeepSeek-V3's 37B of 671B)."""
        per_expert = sum(p.numel() for p in self.experts[0].parameters())
        return self.gate.weight.numel() + self.top_k * per_expert
