"""Which rank runs on which node: every rank's host name, and the labels made from them.

    hosts = rank_hosts()            # a collective: ['node1', 'node2'] on 2 nodes x 1 rank
    hosts_line(hosts)               # 'ranks on hosts: node1 [0], node2 [1] (2 node(s) x 1 rank(s))'
    shape_label(hosts)              # '2 node(s) x 1 rank(s)': the label an img/s figure carries
    first_host('node[1-2]')         # 'node1': the first host of a Slurm node list, without scontrol

`dltutor.core.dist.print_hosts()` prints the line once, from rank 0; the Slurm failure report
(dltutor.launch.job_faults) reads it back to name the ranks of a node that died.
"""
from __future__ import annotations

import re
import socket
import subprocess


def rank_hosts(gather=None) -> list[str]:
    """The host name of every rank, in rank order (a collective: every rank must call it).

    `gather` is the engine's all-gather of a Python object (`hvd.allgather_object` under Horovod);
    by default torch.distributed's, or this host alone outside a process group."""
    host = socket.gethostname()
    if gather is not None:
        return list(gather(host))
    import torch.distributed as tdist
    if not (tdist.is_available() and tdist.is_initialized()):
        return [host]
    hosts = [None] * tdist.get_world_size()
    tdist.all_gather_object(hosts, host)
    return hosts


def ranks_by_host(hosts: list[str]) -> dict[str, list[int]]:
    """{host: its ranks} from every rank's host name in rank order."""
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        by_host.setdefault(host, []).append(rank)
    return by_host


def shape_label(hosts: list[str]) -> str:
    """`2 node(s) x 1 rank(s)` from every rank's host name (`2 node(s)` when they hold unequal
    numbers of ranks): the label an img/s figure carries."""
    by_host = ranks_by_host(hosts)
    per = sorted({len(r) for r in by_host.values()})
    return f"{len(by_host)} node(s) x {per[0]} rank(s)" if len(per) == 1 else f"{len(by_host)} node(s)"


def hosts_line(hosts: list[str]) -> str:
    """`ranks on hosts: node1 [0], node2 [1] (2 node(s) x 1 rank(s))`: which rank ran where."""
    by_host = ranks_by_host(hosts)
    return ("ranks on hosts: " + ", ".join(f"{h} {r}" for h, r in by_host.items())
            + f" ({shape_label(hosts)})")


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list ('nid[001-004,9],gpu1' -> 'nid001'), without scontrol."""
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not head:
        raise ValueError(f"cannot parse node list {nodelist!r}")
    prefix, ranges = head.group(1), head.group(2)
    return prefix + (ranges.split(",")[0].split("-")[0] if ranges else "")


def job_first_node(environ) -> str:
    """The first node of this Slurm job or step (rank 0's host: the MASTER_ADDR every rank meets
    at), from `scontrol show hostnames`, else parsed from the node list; 127.0.0.1 outside a job."""
    nodelist = next((environ[k] for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                          "SLURM_NODELIST") if environ.get(k)), None)
    if not nodelist:
        return "127.0.0.1"
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                             text=True, timeout=30, check=True).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass  # no scontrol on this node: parse the list ourselves
    return first_host(nodelist)
