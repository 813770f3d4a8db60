"""Process groups and the hierarchical (2-D) all-reduce: N ranks seen as M nodes x L ranks each.

The TACC slides (seed 004) list the 2D-torus among the all-reduce algorithms; NCCL and oneCCL
(seed 000: "Default hierarchical algorithm (topo) optimizes intra-node (scale-up) and inter-node
(scale-out) communication") do the same thing on real clusters. With rank = node·L + local_rank:

- `node_groups(world_size, per_node)`: the rank lists of the intra-node groups ({0,1},{2,3} for
  4 ranks as 2 x 2) and the inter-node groups ({0,2},{1,3}: the ranks with the same local_rank).
- `groups_on_hosts(hosts, per_node)`: whether those intra-node groups are the real hosts.
- `make_groups(per_node)` (inside a launched task): `dist.new_group` for each list, on every rank
  in the same order as torch requires; returns this rank's (intra, inter) groups.
- `hierarchical_allreduce(t, intra, inter)`: in place, like `dist.all_reduce(t)`:
  1. ring reduce-scatter inside the node (`collectives.ring_phase`): local rank l owns the node's
     sum of chunk (l + 1) mod L;
  2. `dist.all_reduce` of that chunk across the nodes (the inter group: one rank per node, all
     owning the same chunk), so the slow links carry only D/L;
  3. ring all-gather inside the node.
- `measure_hierarchical(...)` (from a notebook): runs course/labs/05_allreduce/hierarchical_allreduce.py.
The cost model beside the flat ring is `dltutor.allreduce.cost.hierarchical_time`.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from dltutor.allreduce.collectives import ring_phase
from dltutor.allreduce.ring import chunk_bounds, owner_after_reduce_scatter


def node_groups(world_size: int, per_node: int) -> tuple[list[list[int]], list[list[int]]]:
    """(intra-node rank lists, inter-node rank lists) for `world_size` ranks, `per_node` per node."""
    if per_node < 1 or world_size < 1 or world_size % per_node:
        raise ValueError(f"{world_size} ranks do not split into nodes of {per_node}: world_size "
                         "must be a multiple of ranks per node")
    nodes = world_size // per_node
    intra = [list(range(m * per_node, (m + 1) * per_node)) for m in range(nodes)]
    inter = [list(range(local_rank, world_size, per_node)) for local_rank in range(per_node)]
    return intra, inter


def groups_on_hosts(hosts: list[str], per_node: int) -> bool:
    """True when every intra-node group of `node_groups` holds ranks of one host and no two groups
    share a host: the "nodes" of the algorithm are the real ones (else they are pretend)."""
    intra, _ = node_groups(len(hosts), per_node)
    group_hosts = [{hosts[r] for r in ranks} for ranks in intra]
    return all(len(h) == 1 for h in group_hosts) and len({next(iter(h)) for h in group_hosts}) == len(intra)


def make_groups(per_node: int):
    """This rank's (intra-node group, inter-node group); every rank creates every group."""
    intra_lists, inter_lists = node_groups(dist.get_world_size(), per_node)
    rank, mine = dist.get_rank(), {}
    for kind, lists in (("intra", intra_lists), ("inter", inter_lists)):
        for ranks in lists:  # new_group is collective: all ranks, same order, even non-members
            group = dist.new_group(ranks)
            if rank in ranks:
                mine[kind] = group
    return mine["intra"], mine["inter"]


def hierarchical_allreduce(tensor: torch.Tensor, intra, inter) -> torch.Tensor:
    """Sum `tensor` over all ranks in place: reduce-scatter in the node, all-reduce across nodes on
    the shard this rank owns, all-gather in the node. Returns `tensor`."""
    flat = tensor.view(-1)  # a contiguous tensor, as for the ring
    ring_phase(flat, "reduce-scatter", intra)
    local_size, local_rank = dist.get_world_size(intra), dist.get_rank(intra)
    start, stop = chunk_bounds(flat.numel(), local_size)[owner_after_reduce_scatter(local_rank, local_size)]
    if stop > start and dist.get_world_size(inter) > 1:  # same chunk on every rank of `inter`
        dist.all_reduce(flat[start:stop], group=inter)
    ring_phase(flat, "all-gather", intra)
    return tensor


def measure_hierarchical(nproc: int = 4, per_node: int = 2, sizes=("1KiB", "64KiB", "1MiB"),
                         iters: int = 5, warmup: int = 1, passes: int = 3, timeout: float = 600.0,
                         echo: bool = False, oversubscribe: bool = False, env=None) -> dict:
    """From a notebook: run the hierarchical lab on `nproc` local ranks, `per_node` to a "node".

    Returns rank 0's summary (world_size, per_node, nodes, backend, hardware, checks, results with
    algorithm 'ring' / 'gloo' (flat) and 'hierarchical', each with time_s, time_range_s, times_s) and
    `groups`: rank -> {"intra": [...], "inter": [...]}, as every rank reported its own groups."""
    from dltutor.allreduce.sweep import run_lab
    args = ["--per-node", str(per_node), "--sizes", ",".join(str(s).replace(" ", "") for s in sizes),
            "--iters", str(iters), "--warmup", str(warmup), "--passes", str(passes)]
    summary, metrics = run_lab("hierarchical_allreduce.py", nproc, args, timeout=timeout, echo=echo,
                               oversubscribe=oversubscribe, env=env)
    summary = dict(summary)
    summary["groups"] = {m["rank"]: m["groups"] for m in metrics if "groups" in m}
    return summary
