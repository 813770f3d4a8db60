"""Lab 05: all-reduce algorithms side by side — our ring, reduce+broadcast, recursive doubling and
the library's own dist.all_reduce (gloo on CPUs, nccl on GPUs) — plus a ping-pong for α and β.

Every algorithm is first checked against dist.all_reduce on random data of an odd length; then each
is timed over a sweep of sizes. Rank 0 prints a table (size, algorithm, time, algbw, busbw) and one
machine-readable line `DLTUTOR_METRICS {json}` that `dltutor.launch.run` / the notebook parse.

Launch forms (run in this lab's folder):
    python allreduce_bench.py --tiny                          # 1 process: checks run, nothing moves
    torchrun --nproc-per-node 2 allreduce_bench.py --tiny     # 2 local processes
    torchrun --nproc-per-node 4 allreduce_bench.py --sizes 1KiB,1MiB,64MiB   # 4 ranks
    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
             --rdzv-endpoint $HEAD_NODE:29500 allreduce_bench.py       # 2 nodes x 4 ranks
    srun --ntasks 8 python allreduce_bench.py                  # Slurm: one task per rank
    torchrun --nproc-per-node 2 allreduce_bench.py --mode pingpong --tiny  # ping-pong only
A job script for 2 nodes: dltutor.launch.sites.render_job(site, this script, nodes=2).
From a notebook: dltutor.allreduce.collectives.measure_allreduce(nproc=2, sizes=[...]).

Rank 0 first prints every rank's host (`ranks on hosts: node1 [0], node2 [1] (2 node(s) x 1
rank(s))`) and what joins the nodes, from their addresses: on the course's test cluster the nodes
are loopback addresses of one machine, so the link between them is the same as inside a node.
"""
from __future__ import annotations

import sys

import torch

from dltutor.allreduce import collectives as C
from dltutor.allreduce import cost
from dltutor.allreduce.sweep import (add_sweep_flags, link_line, node_link, process_group,
                                    over_passes, result_row)
from dltutor.core import dist as ddist
from dltutor.core import flags
from dltutor.core.device import device, hardware_label
from dltutor.core.hosts import shape_label
from dltutor.core.units import fmt_bytes

DEFAULT_SIZES = "1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB"
TINY_SIZES = "1KiB,64KiB,1MiB"
ALGS = ("ring", "reduce_bcast", "recursive_doubling", "gloo")


def parse_args(argv=None):
    ap = flags.parser(__doc__)
    add_sweep_flags(ap, DEFAULT_SIZES)
    ap.add_argument("--algorithms", type=flags.choice_list(ALGS), default=",".join(ALGS),
                    help=f"comma-separated subset of {','.join(ALGS)}")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "int64"])
    ap.add_argument("--mode", default="both", choices=["allreduce", "pingpong", "both"],
                    help="all-reduce sweep, ping-pong sweep (rank 0 <-> 1, to fit alpha and beta), or both")
    ap.add_argument("--check-numel", type=flags.positive_int, default=1001,
                    help="odd length of the correctness check")
    flags.add_tiny(ap, {"sizes": flags.byte_sizes(TINY_SIZES), "iters": 3, "warmup": 1, "passes": 1})
    return flags.parse(ap, argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    dtype = getattr(torch, a.dtype)
    with process_group() as (rank, n):  # DDP: the launcher's process group (plain python: 1 rank)
        say = print if rank == 0 else (lambda *x, **k: None)
        hosts = ddist.print_hosts()  # DDP: every rank's host (a collective): which node is where
        link = node_link(hosts) if rank == 0 else None  # rank 0 resolves the hosts' addresses
        say(f"# all-reduce lab on {n} rank(s) = {shape_label(hosts)}, {hardware_label()}, "
            f"device {device()}, dtype {a.dtype}")
        if link:
            say(f"# {link_line(link)}")
        summary = {"rank": rank, "world_size": n, "hardware": hardware_label(), "dtype": a.dtype,
                   "hosts": hosts, "shape": shape_label(hosts), "link": link,
                   "checks": {}, "results": [], "pingpong": []}
        if a.mode in ("allreduce", "both"):
            for name in a.algorithms:  # correctness first: an odd length, and one shorter than N
                fn = C.ALLREDUCE[name]
                oks = []
                for numel, seed in ((a.check_numel, 1), (max(1, n - 1), 2)):
                    ok, msg = C.check_against_all_reduce(fn, numel, dtype, seed)
                    oks.append(ok)
                    say(f"check {name:<19} {msg}  {'OK' if ok else 'MISMATCH'}")
                summary["checks"][name] = all(oks)
            spans = over_passes([(name, nbytes) for nbytes in a.sizes for name in a.algorithms],
                                lambda k: C.time_allreduce(C.ALLREDUCE[k[0]], k[1], dtype, a.iters,
                                                           a.warmup), a.passes)
            say(f"\n{'size':>9} {'algorithm':<19} {'fastest (us)':>12} {'algbw GB/s':>11} {'busbw GB/s':>11}"
                f"  {'slowest (us)':>12}")
            for nbytes in a.sizes:
                for name in a.algorithms:
                    t, slowest = spans[(name, nbytes)]
                    row = result_row(name, nbytes, spans[(name, nbytes)], n, summary["checks"][name])
                    summary["results"].append(row)
                    say(f"{fmt_bytes(nbytes):>9} {name:<19} {t * 1e6:12.1f} {row['algbw_GBps']:11.3f} "
                        f"{row['busbw_GBps']:11.3f}  {slowest * 1e6:12.1f}")
        if a.mode in ("pingpong", "both"):
            if n < 2:
                say("\nping-pong needs 2 ranks: launch with torchrun --nproc-per-node 2")
            else:
                say(f"\n{'size':>9} {'one-way (us)':>13} {'GB/s':>8}   ping-pong rank 0 <-> 1")
                spans = over_passes(a.sizes, lambda d: C.pingpong(d, a.iters, a.warmup), a.passes)
                for nbytes in a.sizes:
                    t = spans[nbytes][0]  # None except on rank 0
                    if rank == 0:
                        summary["pingpong"].append({"bytes": nbytes, "time_s": t, "times_s": spans[nbytes].times})
                        say(f"{fmt_bytes(nbytes):>9} {t * 1e6:13.1f} {nbytes / t / 1e9:8.3f}")
                if rank == 0:
                    pp = summary["pingpong"]
                    alpha, beta = cost.fit_alpha_beta([p["bytes"] for p in pp], [p["time_s"] for p in pp])
                    summary["alpha_s"], summary["beta_s_per_byte"] = alpha, beta
                    say(f"fit: alpha = {alpha * 1e6:.1f} us, beta = {beta * 1e9:.3f} ns/byte "
                        f"({(1 / beta / 1e9) if beta else float('inf'):.2f} GB/s)")
        if rank == 0:
            ddist.report(**{k: v for k, v in summary.items() if k not in ("rank", "world_size")})
        failed = [k for k, v in summary["checks"].items() if not v]
    if failed:
        print(f"rank {rank}: results differ from dist.all_reduce for {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
