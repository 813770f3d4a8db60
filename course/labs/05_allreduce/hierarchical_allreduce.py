"""Lab 05b: process groups and the hierarchical (2-D) all-reduce, beside the flat ones.

The ranks are seen as nodes of --per-node ranks (rank = node * per_node + local_rank). Every rank
builds the intra-node groups ({0,1},{2,3} for 4 ranks as 2 x 2) and the inter-node groups
({0,2},{1,3}) with dist.new_group; the hierarchical all-reduce is a ring reduce-scatter inside the
node, an all-reduce of each shard across the nodes, and a ring all-gather inside the node
(dltutor.allreduce.hierarchical). It is checked against dist.all_reduce (int64 exactly, float32
with allclose), then timed beside our flat ring and the library's dist.all_reduce ("gloo"; nccl on
GPUs). Every rank prints one `DLTUTOR_METRICS {json}` line with its groups; rank 0's also holds
the checks and the timings. Rank 0 prints every rank's host, whether the intra-node groups are the
real hosts (a Slurm job of nodes x --per-node ranks) or pretend ones (all ranks on one machine), and
what joins the nodes, from their addresses: on the course's test cluster the nodes are loopback
addresses of one machine, so even real groups see the same link inside and between nodes. Started
with `scripts/slurm_local.sh start --nodes 2 --link 100mbit`, each node of that cluster has a network
of its own and a capped link to the other: rank 0 then also prints the bytes each node sent to the
other per all-reduce of the largest size, counted by the node's interface (dltutor.allreduce.link),
beside the model's 2(N-1)/N x D for the flat ring and 2(M-1)/M x D for the 2-D one.

Launch forms (run in this lab's folder):
    python hierarchical_allreduce.py --tiny                          # 1 process: 1 node of 1 rank
    torchrun --nproc-per-node 4 hierarchical_allreduce.py --tiny     # 4 ranks as 2 "nodes" x 2
    torchrun --nproc-per-node 8 hierarchical_allreduce.py --per-node 4   # 2 "nodes" x 4
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
             --rdzv-endpoint $HEAD_NODE:29500 hierarchical_allreduce.py --per-node 4   # real nodes
    srun --ntasks 8 --ntasks-per-node 4 python hierarchical_allreduce.py --per-node 4   # Slurm
A job script for 2 nodes x 2 ranks: dltutor.launch.sites.render_job(site, this script, nodes=2,
tasks_per_node=2, args=["--per-node", 2]).
From a notebook: dltutor.allreduce.hierarchical.measure_hierarchical(nproc=4, per_node=2, ...).
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist  # DDP:

from dltutor.allreduce import collectives as C
from dltutor.allreduce import hierarchical as H
from dltutor.allreduce import link as L
from dltutor.allreduce.sweep import (add_sweep_flags, link_line, node_link, process_group,
                                    over_passes, result_row)
from dltutor.core import dist as ddist
from dltutor.core import flags
from dltutor.core.device import device, hardware_label
from dltutor.core.units import fmt_bytes

TINY_SIZES = "1KiB,64KiB,1MiB"
LINK_CALLS = 3          # all-reduces of the largest size whose inter-node bytes are counted


def parse_args(argv=None):
    ap = flags.parser(__doc__)
    ap.add_argument("--per-node", type=flags.positive_int, default=2,
                    help="ranks per (pretend) node; world_size must be a multiple of it")
    add_sweep_flags(ap, "1KiB,16KiB,256KiB,4MiB,16MiB")
    ap.add_argument("--check-numel", type=flags.positive_int, default=1001,
                    help="odd length of the correctness check")
    flags.add_tiny(ap, {"sizes": flags.byte_sizes(TINY_SIZES), "iters": 3, "warmup": 1, "passes": 1})
    return flags.parse(ap, argv)


def count_link_bytes(algs, nbytes, hosts, real, per_node, say) -> dict:
    """Bytes each node sent to the other nodes per all-reduce of `nbytes`, as its network interface
    counted them (dltutor.allreduce.link), beside the model's figure; None where nothing crosses a
    network (one node, or nodes that are one machine's loopback addresses)."""
    buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=device())
    measured = {name: L.inter_node_bytes(lambda f=f: f(buf), LINK_CALLS, hosts)  # DDP: collective
                for name, f in algs.items()}
    nodes = len(set(hosts))
    model = {name: L.modelled_bytes(name, nodes, per_node, nbytes) if real else None for name in algs}
    if None in measured.values():
        say(f"# bytes between nodes: not counted ({'one node' if nodes < 2 else 'the nodes share one loopback'}: "
            "no network interface carries them)")
    else:
        say(f"# bytes each node sent to the other nodes per all-reduce of {fmt_bytes(nbytes)} "
            f"(counted on its interface, {LINK_CALLS} calls; D = {fmt_bytes(nbytes)}):")
        for name, got in measured.items():
            want = f", model {model[name] / nbytes:.2f} x D" if model[name] else ""
            say(f"#   {name:<13} {fmt_bytes(int(got))} = {got / nbytes:.2f} x D{want}")
    return {"bytes": nbytes, "calls": LINK_CALLS, "measured": measured, "model": model}


def main(argv=None) -> int:
    a = parse_args(argv)
    with process_group() as (rank, n):  # DDP: the launcher's process group (plain python: 1 rank)
        say = print if rank == 0 else (lambda *x, **k: None)
        per_node = min(a.per_node, n)  # plain `python`: one node of one rank
        hosts = ddist.print_hosts()  # DDP: every rank's host (a collective): which node is where
        real = H.groups_on_hosts(hosts, per_node)
        intra, inter = H.make_groups(per_node)  # DDP: every rank, every group, same order
        groups = {"intra": dist.get_process_group_ranks(intra),
                  "inter": dist.get_process_group_ranks(inter)}
        say(f"# hierarchical all-reduce on {n} rank(s) = {n // per_node} node(s) x {per_node}, "
            f"{hardware_label()}, backend {dist.get_backend()}, device {device()}")
        if rank == 0:
            say(f"# intra-node groups {'are the real hosts' if real else 'are pretend nodes'}; "
                f"{link_line(node_link(hosts))}")
        print(f"rank {rank}: intra-node group {groups['intra']}, inter-node group {groups['inter']}",
              flush=True)
        algs = {"hierarchical": lambda t: H.hierarchical_allreduce(t, intra, inter),
                "ring": C.ring_allreduce, "gloo": C.ALLREDUCE["gloo"]}
        checks = {}
        for dtype in (torch.int64, torch.float32):  # int64: exactly equal; float32: allclose
            for numel, seed in ((a.check_numel, 1), (max(1, n - 1), 2)):
                ok, msg = C.check_against_all_reduce(algs["hierarchical"], numel, dtype, seed)
                checks[f"{dtype}".replace("torch.", "") + f" numel={numel}"] = ok
                say(f"check hierarchical {msg}  {'OK' if ok else 'MISMATCH'}")
        spans = over_passes([(name, d) for d in a.sizes for name in algs],
                            lambda k: C.time_allreduce(algs[k[0]], k[1], torch.float32, a.iters, a.warmup),
                            a.passes)
        rows = [result_row(name, d, spans[(name, d)], n, all(checks.values()))
                for d in a.sizes for name in algs]
        say(f"\n{'size':>9} {'algorithm':<13} {'fastest (us)':>12} {'busbw GB/s':>11}  {'slowest (us)':>12}")
        for r in rows:
            lo, hi = r["time_range_s"]
            say(f"{fmt_bytes(r['bytes']):>9} {r['algorithm']:<13} {lo * 1e6:12.1f} {r['busbw_GBps']:11.3f}"
                f"  {hi * 1e6:12.1f}")
        link_bytes = count_link_bytes(algs, max(a.sizes), hosts, real, per_node, say)
        extra = {} if rank else {"per_node": per_node, "nodes": n // per_node, "checks": checks,
                                 "hosts": hosts, "groups_on_hosts": real, "link": node_link(hosts),
                                 "link_bytes": link_bytes, "results": rows, "hardware": hardware_label(),
                                 "backend": dist.get_backend(), "device": str(device())}
        ddist.report(groups=groups, **extra)
        failed = [k for k, v in checks.items() if not v]
    if failed:
        print(f"rank {rank}: hierarchical all-reduce differs from dist.all_reduce for {failed}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
