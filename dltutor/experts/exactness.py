"""Expert parallelism against one process: the same seeded MoE layer, the same tokens, fp64.

Every rank builds the same MoE (dltutor.experts.layer) and the same inputs for every rank, runs the
one-process layer on all ranks' tokens (`groups` = world size: capacity per rank, as expert
parallelism routes), its own tokens through ExpertParallelMoE (dltutor.experts.parallel), and
reports the largest differences: output, input gradient, the gate's gradient (summed over the
ranks) and each owned expert's gradient. `cases(rank, world)` runs the set the lab's --check and the
course's tests use: top-1 and top-2, with and without a capacity factor, with and without an expert
that gets no token, and a rank whose experts get no token while its input needs no gradient.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from dltutor.experts import parallel
from dltutor.experts.layer import MoE

D, HIDDEN, TOKENS = 6, 10, 12          # width, expert hidden width, tokens per rank


def inputs(world: int, seed: int, device=None):
    """Every rank's tokens and the weights of a weighted-sum loss, [world, TOKENS, D] each."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(world, TOKENS, D, generator=g, dtype=torch.float64).to(device),
            torch.randn(world, TOKENS, D, generator=g, dtype=torch.float64).to(device))


def err(a, b) -> float:
    """Largest |a - b| (a missing gradient counts as zeros)."""
    a = torch.zeros(()) if a is None else a
    b = torch.zeros(()) if b is None else b
    return float((a - b).abs().max())


def compare(rank: int, world: int, top_k: int, cf, empty=(), x_grad: bool = True, seed: int = 0,
            device=None) -> dict:
    """One case: EP on this rank's tokens vs the one-process layer on everyone's."""
    num_experts = 2 * world
    moe = MoE(D, HIDDEN, num_experts, top_k, cf, seed=seed).double().to(device)
    for e in empty:
        moe.logit_bias[e] = -1e4               # expert e is never chosen: it gets no token
    xs, ws = inputs(world, seed + 1, device)
    ref_x = xs.reshape(-1, D).clone().requires_grad_()
    (moe(ref_x, groups=world) * ws.reshape(-1, D)).sum().backward()
    ep = parallel.ExpertParallelMoE.from_moe(moe)
    x = xs[rank].clone().requires_grad_(x_grad)
    y = ep(x)
    joined = torch.tensor([int(ep.last_stats["in_backward"])], device=device)
    dist.all_reduce(joined, op=dist.ReduceOp.MIN)  # backward only if every rank joins it
    if joined.item():
        (y * ws[rank]).sum().backward()
        ep.allreduce_gate_grads()
    ref_y = moe(ref_x.detach(), groups=world).view(world, TOKENS, D)[rank]
    expert_err = max(err(p.grad, moe.experts[i].get_parameter(n).grad)
                     for j, i in enumerate(ep.owned) for n, p in ep.experts[j].named_parameters())
    s, r = ep.last_stats, ep.last_routing
    return dict(top_k=top_k, cf=cf, empty=list(empty), x_grad=x_grad, world=world,
                out_err=err(y, ref_y),
                dx_err=err(x.grad, ref_x.grad.view(world, TOKENS, D)[rank]) if x_grad else 0.0,
                gate_err=err(ep.gate.weight.grad, moe.gate.weight.grad) if joined.item() else float("inf"),
                expert_err=expert_err if joined.item() else float("inf"), joined=bool(joined.item()),
                dropped=r.dropped_fraction, capacity=r.capacity, load=r.load.tolist(),
                kept_load=r.kept_load.tolist(), counts_matrix=s["counts_matrix"],
                stats={k: v for k, v in s.items() if not k.endswith("_s")},
                sent=s["split_sent"], received=s["split_received"], owned=list(ep.owned))


def cases(rank: int, world: int, device=None) -> list[dict]:
    """The course's set of cases (see the module's docstring), each compare()'s dict."""
    grid = [(k, cf, e) for k in (1, 2) for cf in (None, 1.0) for e in ((), (2 * world - 1,))]
    out = [compare(rank, world, k, cf, empty, seed=s, device=device)
           for s, (k, cf, empty) in enumerate(grid)]
    # the last rank's experts get no token and x needs no grad: that rank still joins backward
    out.append(compare(rank, world, 2, None, empty=(2 * world - 2, 2 * world - 1), x_grad=False,
                       seed=9, device=device))
    return out
