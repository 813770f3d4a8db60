"""A hostfile (DeepSpeed) or host list (horovodrun -H) checked against the Slurm job it runs in.

DeepSpeed's and Horovod's launchers start the remote ranks themselves, over ssh or pdsh, on the
hosts they are given. A host that is not a node of the job is reached outside the allocation (or
not at all: ssh waits, then fails); more slots on a node than the job has tasks there oversubscribe
its CPUs or GPUs. Slurm cannot stop either: it does not start those ranks. This check refuses both
before the launcher runs, with one message naming the host and the job's nodes.

    python -m dltutor.launch.hostfile --hostfile "$HOSTFILE"     # DeepSpeed: "node1 slots=2" lines
    python -m dltutor.launch.hostfile -H "$HOSTS"                # horovodrun: "node1:2,node2:2"
    python -m dltutor.launch.hostfile -H "$HOSTS" --nodefile "$PBS_NODEFILE"    # in a PBS job

Run inside the job (it reads SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE; in a PBS job the
nodes are the lines of --nodefile and PBS_JOBID names the job, slots are not checked); exit 0 with one
line saying what matched, or 2 with the message on stderr (the job script's `set -e` stops there).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

_SLOTS_LINE = re.compile(r"^(\S+)\s+slots=(\d+)\s*$")
_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


class HostfileError(ValueError):
    """A hostfile or host list that does not fit the job: what, where, and what to do."""


def parse_hostfile(text: str) -> list[tuple[str, int]]:
    """[(host, slots)] of a DeepSpeed hostfile: `host slots=N` lines, `#` comments, blank lines."""
    entries = []
    for no, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _SLOTS_LINE.match(line)
        if not m:
            raise HostfileError(f"hostfile line {no} is {line!r}: each line must be `host slots=N`")
        entries.append((m.group(1), int(m.group(2))))
    return entries


def parse_hosts(spec: str) -> list[tuple[str, int]]:
    """[(host, slots)] of a horovodrun -H list `node1:2,node2:2` (no `:N`: 1 slot)."""
    entries = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        host, _, slots = item.partition(":")
        if not host or (slots and not slots.isdigit()):
            raise HostfileError(f"-H entry {item!r}: each entry must be `host` or `host:slots`")
        entries.append((host, int(slots or 1)))
    return entries


def tasks_per_node(spec: str, nodes: list[str]) -> dict[str, int]:
    """{node: tasks} from SLURM_TASKS_PER_NODE ('2(x2),1') over the job's nodes in order."""
    counts = []
    for part in filter(None, spec.split(",")):
        m = _TASKS.match(part.strip())
        if not m:
            return {}
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return dict(zip(nodes, counts)) if len(counts) == len(nodes) else {}


def job_nodes(environ=None) -> list[str]:
    """The job's nodes (`scontrol show hostnames $SLURM_JOB_NODELIST`); HostfileError outside a job."""
    e = os.environ if environ is None else environ
    nodelist = e.get("SLURM_JOB_NODELIST") or e.get("SLURM_NODELIST")
    if not nodelist:
        raise HostfileError("not inside a Slurm job (no SLURM_JOB_NODELIST): run this check in the "
                            "job script, before the launcher")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                             text=True, timeout=30, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError) as exc:
        raise HostfileError(f"`scontrol show hostnames {nodelist}` failed ({exc}): is Slurm's "
                            "scontrol on this node's PATH?") from None
    return out


def _short(host: str) -> str:
    return host.split(".")[0]


def mismatch(entries, nodes: list[str], tasks: dict[str, int], what: str, job: str,
             listing: str = "scontrol show hostnames $SLURM_JOB_NODELIST") -> str | None:
    """The message for the first entry that is not a node of the job or asks more slots than the
    job has tasks on that node; None when every entry fits."""
    names = {_short(n): n for n in nodes}
    listed = ", ".join(nodes)
    if not entries:
        return f"{what} names no host: list the job's nodes ({listed})"
    for host, slots in entries:
        node = names.get(_short(host))
        if node is None:
            return (f"{what} names host {host}, which is not a node of {job} (its nodes: {listed}): "
                    f"the launcher would start ranks there over ssh, outside the allocation. List "
                    f"only the job's nodes (`{listing}`).")
        if node in tasks and slots > tasks[node]:
            return (f"{what} asks {slots} slot(s) on {node}, but {job} has {tasks[node]} task(s) "
                    f"there (SLURM_TASKS_PER_NODE): ask for them in the job (#SBATCH "
                    f"--ntasks-per-node={slots}) or give {node} at most {tasks[node]} slot(s).")
    return None


def nodefile_nodes(path: str) -> list[str]:
    """The nodes of a PBS job: the distinct lines of its node file, in order."""
    try:
        lines = open(path).read().split()
    except OSError as exc:
        raise HostfileError(f"cannot read the node file {path}: {exc.strerror} (run this check in "
                            "the PBS job script, with --nodefile \"$PBS_NODEFILE\")") from None
    return list(dict.fromkeys(lines))


def check(entries, what: str, environ=None, nodefile: str | None = None) -> str:
    """One line saying what matched; HostfileError with the message when an entry does not fit."""
    e = os.environ if environ is None else environ
    if nodefile:
        nodes, job, tasks = nodefile_nodes(nodefile), f"job {e.get('PBS_JOBID', '?')}", {}
    else:
        nodes = job_nodes(e)
        job = f"job {e.get('SLURM_JOB_ID', '?')}"
        tasks = tasks_per_node(e.get("SLURM_TASKS_PER_NODE", ""), nodes)
    listing = f"sort -u {nodefile}" if nodefile else "scontrol show hostnames $SLURM_JOB_NODELIST"
    problem = mismatch(entries, nodes, tasks, what, job, listing)
    if problem:
        raise HostfileError(problem)
    return f"{what} fits {job}: " + ", ".join(f"{h} slots={s}" for h, s in entries)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dltutor.launch.hostfile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--hostfile", help="a DeepSpeed hostfile (`host slots=N` lines)")
    group.add_argument("-H", "--hosts", help="a horovodrun host list (`node1:2,node2:2`)")
    p.add_argument("--nodefile", help="a PBS job's node file ($PBS_NODEFILE): its nodes, not Slurm's")
    a = p.parse_args(argv)
    try:
        if a.hostfile:
            try:
                text = open(a.hostfile).read()
            except OSError as exc:
                raise HostfileError(f"cannot read hostfile {a.hostfile}: {exc.strerror}") from None
            line = check(parse_hostfile(text), f"hostfile {a.hostfile}", nodefile=a.nodefile)
        else:
            line = check(parse_hosts(a.hosts), f"-H {a.hosts}", nodefile=a.nodefile)
    except HostfileError as exc:
        print(f"dltutor.launch.hostfile: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"dltutor.launch.hostfile: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
