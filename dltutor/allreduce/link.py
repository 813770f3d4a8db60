"""The bytes an all-reduce puts on the link between nodes, counted by the nodes' network interfaces.

A node sends to the other nodes through the interface that holds its own address (its host name's
address); what its ranks send each other stays on the node's loopback. So the bytes that interface
sent while an all-reduce ran are that node's inter-node traffic: counted by the kernel
(/proc/net/dev of the node's network namespace, read with psutil), not modelled.

- `node_interface(host)`: the interface of this network namespace that holds `host`'s address;
  None when the address is a loopback one (nodes that are one machine's loopback addresses: their
  traffic between "nodes" never leaves the loopback, so there is nothing to count).
- `inter_node_bytes(run, calls, hosts)` (collective, every rank): bytes each node sent off the node
  per call of `run()`, averaged over the nodes; None when some node has no such interface.
- `modelled_bytes(algorithm, nodes, per_node, nbytes)`: what the cost model says one node sends
  off the node per all-reduce of `nbytes`: a flat ring of N = M·L ranks crosses each node boundary
  once, with 2(N−1)/N·D; the hierarchical one sends 2(M−1)/M·(D/L) from each of a node's L ranks.

What is counted includes TCP/IP headers, the receivers' acknowledgements and two barriers' bytes,
so it sits a few percent above the payload the cost model counts (`dltutor.allreduce.cost`).
Used by course/labs/05_allreduce/hierarchical_allreduce.py.
"""
from __future__ import annotations

import ipaddress
import socket

import psutil
import torch
import torch.distributed as dist

from dltutor.core.device import device


def node_interface(host: str) -> str | None:
    """The interface holding `host`'s IPv4 address here; None for a loopback or unknown address."""
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return None
    if ipaddress.ip_address(address).is_loopback:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return name
    return None


def _sent(interface: str) -> int:
    return psutil.net_io_counters(pernic=True)[interface].bytes_sent


def inter_node_bytes(run, calls: int, hosts: list[str]) -> float | None:
    """Bytes one node sends to the others per `run()`, averaged over the nodes (collective).

    Every rank calls it with every rank's host (`dltutor.core.dist.print_hosts`). The first rank
    of each host reads its node's interface once the earlier traffic is over (a barrier) and
    before any rank starts (a second barrier), and again after `calls` runs and a third barrier;
    the counts are summed over the nodes with an all-reduce that runs after the second reading."""
    rank = dist.get_rank()
    leader = hosts.index(hosts[rank]) == rank            # the first rank on this host reads
    interface = node_interface(hosts[rank]) if leader else None
    dist.barrier()
    before = _sent(interface) if interface else 0
    dist.barrier()                                       # no rank sends before every node has read
    for _ in range(calls):
        run()
    dist.barrier()
    sent = _sent(interface) - before if interface else 0
    counts = torch.tensor([sent, int(leader and interface is None)], dtype=torch.int64,
                          device=device())                # the rank's device (nccl on a GPU)
    dist.all_reduce(counts)
    counts = counts.cpu()
    nodes = len(set(hosts))
    if counts[1].item() > 0 or nodes < 2:                # a node with nothing to count, or one node
        return None
    return counts[0].item() / nodes / calls


def modelled_bytes(algorithm: str, nodes: int, per_node: int, nbytes: int) -> float | None:
    """One node's off-node bytes per all-reduce by the model; None for an algorithm it does not
    describe (the library's own all-reduce)."""
    n = nodes * per_node
    if algorithm == "ring":            # rank order crosses each node boundary once
        return 2 * (n - 1) / n * nbytes
    if algorithm == "hierarchical":    # L ranks, each a ring of M over its D/L shard: L x 2(M-1)/M x D/L
        return 2 * (nodes - 1) / nodes * nbytes
    return None
