"""Which Slurm nodes a launch can use: the job this kernel runs in, and the cluster's nodes in service.

A Jupyter server started as a Slurm job (a portal's) holds an allocation: a launch of as many
nodes as it holds is an `srun --overlap` step of it; a launch of more nodes is a job of its own.
`nodes_in_service()` asks `sinfo` how many nodes could take a job now (notebook 02's section 5
submits a 2-node job when there are two).
"""
from __future__ import annotations

import os
import subprocess


def in_allocation(environ=None) -> bool:
    """True when this kernel runs inside a Slurm job (then launches are `srun --overlap` steps)."""
    return bool((os.environ if environ is None else environ).get("SLURM_JOB_ID"))


def allocation_nodes(environ=None) -> int:
    """How many nodes the job this kernel runs in holds (0 outside a job)."""
    e = os.environ if environ is None else environ
    return int(e.get("SLURM_JOB_NUM_NODES") or e.get("SLURM_NNODES") or 1) if in_allocation(e) else 0


IN_SERVICE = {"idle", "mixed", "allocated", "completing"}   # sinfo %T of a node that takes jobs


def nodes_in_service() -> int:
    """How many nodes of the cluster can run a job now (`sinfo`: idle, mixed, allocated or
    completing, and responding: no `*`); 0 without Slurm or when no controller answers."""
    try:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                           timeout=15)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if r.returncode != 0:
        return 0
    return len({name for name, state in (ln.split() for ln in r.stdout.splitlines() if ln.strip())
                if state in IN_SERVICE})
