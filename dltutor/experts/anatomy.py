"""One MoE layer on one process, looked at once: where its tokens go, what capacity drops, what
the load-balancing loss says, and how many of its parameters one token uses.

    rows, moe = route_once(skews=(0.0, 2.0))     one row per (skew, expert)
    anatomy_findings(rows, moe)                 the sentences the notebook prints

The tokens are random (seeded) and the gate untrained: this shows the mechanics, not a trained
router (section 10 of notebook 09 trains one on Fashion-MNIST).
"""
from __future__ import annotations

import torch

from dltutor.core.findings import fmt
from dltutor.experts.layer import MoE


def route_once(skews=(0.0, 2.0), tokens: int = 256, d_model: int = 16, hidden: int = 32,
               num_experts: int = 4, top_k: int = 2, capacity_factor: float = 1.0,
               seed: int = 0) -> tuple[list[dict], MoE]:
    """Route the same seeded tokens through the same layer with expert 0's logit raised by each
    skew: one row per (skew, expert) with slots routed, capacity, slots kept and dropped, and
    the layer's aux loss and dropped fraction."""
    moe = MoE(d_model, hidden, num_experts, top_k, capacity_factor, seed=seed)
    x = torch.randn(tokens, d_model, generator=torch.Generator().manual_seed(seed + 1))
    rows = []
    for skew in skews:
        with torch.no_grad():
            moe.logit_bias.zero_()
            moe.logit_bias[0] = skew
            moe(x)
        r = moe.last_routing
        for e in range(num_experts):
            rows.append({"skew": skew, "expert": e, "routed": int(r.load[e]),
                         "capacity": r.capacity, "kept": int(r.kept_load[e]),
                         "dropped": int(r.load[e] - r.kept_load[e]),
                         "aux_loss": float(r.aux_loss), "dropped_fraction": r.dropped_fraction,
                         "tokens": tokens, "top_k": top_k})
    with torch.no_grad():
        moe.logit_bias.zero_()
    return rows, moe


def anatomy_findings(rows: list[dict], moe: MoE) -> list[str]:
    """What the routing showed, from the rows; and the parameters a token uses."""
    out = []
    for skew in dict.fromkeys(r["skew"] for r in rows):
        mine = [r for r in rows if r["skew"] == skew]
        most = max(mine, key=lambda r: r["dropped"])
        slots = mine[0]["tokens"] * mine[0]["top_k"]
        out.append(f"skew {fmt(skew)}: {len(mine)} experts got {', '.join(str(r['routed']) for r in mine)} "
                   f"of {slots:,} slots (even: {slots // len(mine)} each); capacity {mine[0]['capacity']} "
                   f"per expert, so {sum(r['dropped'] for r in mine)} slots dropped "
                   f"({fmt(100 * mine[0]['dropped_fraction'])} %)"
                   + (f", most at expert {most['expert']}; " if most["dropped"] else "; ") +
                   f"aux loss {mine[0]['aux_loss']:.3f} (1 when the shares and the gate's probabilities are all even).")
    total = sum(p.numel() for p in moe.parameters())
    active = moe.active_parameters()
    out.append(f"Parameters: {total:,} in the layer, {active:,} used by one token (the gate and "
               f"{moe.top_k} of {moe.num_experts} experts): {fmt(100 * active / total)} %. "
               "For scale, seed 001's DeepSeek-V3 figure (from DeepSeek's technical report, 2024): 37B of "
               "671B active per token (5.5 %), attention and its shared expert counted in the 37B.")
    return out
