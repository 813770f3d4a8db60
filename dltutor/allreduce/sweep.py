"""The timing sweep both lab-05 scripts run: passes over (algorithm, size) and the rows they report.

- `over_passes(keys, measure, passes)`: key -> `Span` (fastest, slowest; `.times`: every pass)
  over `passes` sweeps through all keys, after one untimed warm-up sweep, each pass starting at
  another key (`pass_order`).
- `result_row(algorithm, nbytes, span, n, ok)`: one row of a lab summary: time_s (the fastest pass,
  what the α-β fits use), time_range_s [fastest, slowest], times_s (every pass: the findings
  compare their mean ± its 95 % confidence interval, `pass_mean_ci`), algbw / busbw in GB/s, ok.
- `add_sweep_flags(parser, sizes)`: the flags both labs share (--sizes, --iters, --warmup, --passes).
- `process_group()`: inside a lab, join the launcher's process group (plain `python`: a 1-rank
  group); yields (rank, world_size).
- `node_link(hosts)` / `link_line(link)`: what joins the ranks' hosts (their addresses, resolved
  where rank 0 runs), said without claiming a network the run did not cross.
- `run_lab(name, nproc, args, ...)`: from a notebook, run a lab 05 script on `nproc` local ranks
  (`dltutor.launch.run.launch`) and return (rank 0's summary, every rank's metrics).
Used by course/labs/05_allreduce/allreduce_bench.py and hierarchical_allreduce.py.
"""
from __future__ import annotations

import contextlib

from dltutor.allreduce import cost
from dltutor.core import course, flags


def add_sweep_flags(ap, sizes: str) -> None:
    """--sizes (default `sizes`), --iters, --warmup, --passes: what one timing sweep needs."""
    ap.add_argument("--sizes", type=flags.byte_sizes, default=sizes,
                    help="comma-separated message sizes (bytes, KiB, MiB, GiB)")
    ap.add_argument("--iters", type=flags.positive_int, default=20,
                    help="at least this many back-to-back calls per timing (more if they last < 50 ms)")
    ap.add_argument("--warmup", type=flags.nonnegative_int, default=3, help="untimed repetitions per size")
    ap.add_argument("--passes", type=flags.positive_int, default=3,
                    help="the whole sweep is repeated this many times (after one untimed warm-up sweep, "
                         "each pass starting at another size) and each size reports its fastest pass: "
                         "interference on a shared machine only ever adds time (timeit's rule)")


class Span(tuple):
    """(fastest, slowest) of a key's passes; `.times` holds every pass, in pass order."""

    def __new__(cls, times):
        times = list(times)
        span = (None, None) if None in times else (min(times), max(times))
        obj = super().__new__(cls, span)
        obj.times = [] if None in times else times
        return obj


def pass_mean_ci(row: dict) -> tuple[float, float]:
    """(mean over the row's passes, its 95 % CI half-width; `dltutor.core.spread`). A row without
    `times_s` (one pass, or an older summary) gives (time_s, nan): no interval."""
    from dltutor.core import spread
    times = row.get("times_s") or []
    if len(times) < 2:
        return row["time_s"], float("nan")
    return spread.mean_and_ci(times)


def no_interval_blank(rows: list[dict]) -> list[dict]:
    """Rows for a table: a nan (no interval: one pass or one seed) shown blank (the table's
    `missing` mark), never as a number."""
    import math
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]


def over_passes(keys, measure, passes: int, warm: bool = True) -> dict:
    """key -> `Span` of `measure(key)` over `passes` sweeps through all keys: (fastest, slowest),
    with every pass's value in `.times`. A key whose measure returns None on this rank (the
    ping-pong off ranks 0 and 1) maps to (None, None).

    Warm-up cannot spoil a key: with `warm`, one untimed sweep through every key comes first
    (connections, buffers, caches), and each pass starts at a different key (`pass_order`), so
    no key is always the one measured first in a pass, right after the largest message."""
    keys = list(keys)
    for k in keys if warm else ():
        measure(k)
    seen = {k: [] for k in keys}
    for p in range(passes):
        for k in pass_order(keys, p, passes):
            seen[k].append(measure(k))
    return {k: Span(v) for k, v in seen.items()}


def pass_order(keys: list, p: int, passes: int) -> list:
    """The keys of pass `p` of `passes`: rotated to start at key p·len/passes, so each pass begins
    at a different key (and every rank computes the same order)."""
    start = p * len(keys) // max(1, passes)
    return keys[start:] + keys[:start]


def result_row(algorithm: str, nbytes: int, span: Span, n: int, ok: bool) -> dict:
    """One measured row: the fastest pass is the time (the fits use it), [fastest, slowest] its
    range, `times_s` every pass (the findings compare their mean and its 95 % CI)."""
    t, slowest = span
    return {"algorithm": algorithm, "bytes": nbytes, "time_s": t, "time_range_s": [t, slowest],
            "times_s": list(getattr(span, "times", [])),
            "algbw_GBps": cost.algbw(nbytes, t) / 1e9, "busbw_GBps": cost.busbw(nbytes, t, n) / 1e9,
            "ok": ok}


def node_link(hosts: list[str]) -> dict:
    """The ranks' hosts and what joins them: {"nodes", "addresses" (host -> address, None if it
    does not resolve here), "loopback": every address is a loopback one (127.x: one machine)}."""
    import ipaddress
    import socket
    addresses = {}
    for host in dict.fromkeys(hosts):
        try:
            addresses[host] = socket.gethostbyname(host)
        except OSError:
            addresses[host] = None
    known = [a for a in addresses.values() if a]
    return {"nodes": len(addresses), "addresses": addresses,
            "loopback": len(known) == len(addresses) and all(ipaddress.ip_address(a).is_loopback
                                                             for a in known)}


def link_line(link: dict) -> str:
    """One sentence on the link between the nodes, from `node_link`'s answer."""
    where = ", ".join(f"{h} {a or '(unresolved)'}" for h, a in link["addresses"].items())
    if link["nodes"] == 1:
        return f"link: one node ({where}): every message between ranks stays on it"
    if link["loopback"]:
        return (f"link: {link['nodes']} nodes at loopback addresses ({where}): they are one machine, "
                "so the link between them is its loopback, the same as inside a node; no slower "
                "inter-node link is measured here (the course's test cluster gives its nodes one: "
                "scripts/slurm_local.sh start --nodes 2 --link 100mbit)")
    if None in link["addresses"].values():
        return f"link: {link['nodes']} nodes ({where}): not every address resolves here, link unknown"
    return f"link: {link['nodes']} nodes ({where}): messages between nodes cross the network"


@contextlib.contextmanager
def process_group():
    """Join the launcher's process group; plain `python` gets a 1-rank in-process group, with the
    backend of the device (nccl on a GPU, as the printed label says; gloo on the CPU)."""
    import torch.distributed as dist  # DDP:

    from dltutor.core import dist as ddist
    from dltutor.core.device import backend
    with ddist.session() as ctx:  # DDP: torchrun / srun / mpiexec variables -> process group
        if not dist.is_initialized():  # single process: all_reduce is then a copy
            dist.init_process_group(backend(ctx.device), store=dist.HashStore(), rank=0, world_size=1)
        yield ctx.rank, ctx.world_size


def run_lab(name: str, nproc: int, args, timeout: float = 600.0, echo: bool = True,
            oversubscribe: bool = False, env=None) -> tuple[dict, list[dict]]:
    """Run course/labs/05_allreduce/`name` on `nproc` local ranks; (rank 0's summary: its metrics
    line with "results" and `load`: the 1-minute load average before and after, cores, ranks;
    every rank's metrics lines)."""
    import os

    from dltutor.launch.run import launch
    before = os.getloadavg()[0]
    res = launch(str(course.lab(f"05_allreduce/{name}")), nproc=nproc, args=list(args),
                 timeout=timeout, echo=echo, oversubscribe=oversubscribe, env=env)
    summary = [m for m in res.metrics if m.get("rank") == 0 and "results" in m]
    if not summary:
        raise RuntimeError(f"the lab printed no summary line on rank 0 (logs: {res.log_dir})")
    load = {"before": before, "after": os.getloadavg()[0], "cores": os.cpu_count(), "ranks": nproc}
    return dict(summary[0], load=load), res.metrics
