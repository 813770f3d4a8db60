"""Why a Slurm job failed or can never start, from Slurm's own reports, with the node and rank named.

`job_error(job_id, state, code, output)` is the SlurmError that dltutor.launch.slurm.run_batch raises
for a job that did not complete: the tasks srun reports failed (task_failures, failed_tasks: the
ones to blame, task_lines: their last lines), or the node Slurm lost. Its parts:

  lost_nodes(output, job_nodes)   the nodes Slurm lost during the job: srun's "Node failure on X"
                                  lines, and those of the job's nodes Slurm now has DOWN or
                                  NOT_RESPONDING (`scontrol show node`, after SlurmdTimeout)
  node_failure(output, ...)       that as one sentence: the node, Slurm's state and reason for it,
                                  and the ranks that ran there (from the "ranks on hosts" line that
                                  dltutor.core.dist.print_hosts prints; never inferred)
  never_starts(job_id)            a PENDING job whose Slurm Reason waiting cannot clear (more CPUs per
                                  node or more nodes than the partition has): the ask next to what
                                  the nodes have (`sinfo`)
  known_cause(output, tasks)      a rendezvous error of torch (a port already taken) with the node
                                  srun ran that task on: that task is the one to blame
"""
from __future__ import annotations

import re
import subprocess

from dltutor.launch.results import blame_ranks
from dltutor.launch.srun_lines import LABEL

TASK_FAIL = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (Exited with exit code \d+|Killed|"
                       r"Terminated|Segmentation fault|Aborted|[A-Z][a-z ]+)")
_SIGNALLED = {"Killed": -9, "Terminated": -15}
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")
_HOSTS_LINE = re.compile(r"ranks on hosts: (.*?) \(\d+ node")         # dltutor.core.hosts.hosts_line
_HOST_RANKS = re.compile(r"(\S+) \[([\d, ]+)\]")
_PORT_IN_USE = re.compile(r"port: (\d+).*EADDRINUSE|EADDRINUSE.*port: (\d+)")
LOST = ("DOWN", "NOT_RESPONDING", "FAIL")        # parts of a node State that mean it is gone
# Reasons of a PENDING job that waiting does not clear when the request exceeds the partition's
# nodes (more CPUs on a node than any has, more nodes than it has); never_starts checks the numbers.
NEVER_CLEARS = {"PartitionConfig", "PartitionNodeLimit", "BadConstraints"}


class SlurmError(RuntimeError):
    """A job or step that failed; `failed_tasks` names the tasks (ranks) that failed."""

    def __init__(self, message, job_id=None, state=None, failed_tasks=(), output=""):
        super().__init__(message)
        self.job_id, self.state, self.output = job_id, state, output
        self.failed_tasks = list(failed_tasks)


def _task_ids(spec: str) -> list[int]:
    """'0-1,4' -> [0, 1, 4]"""
    ids = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        ids += range(int(lo), int(hi or lo) + 1)
    return ids


def task_failures(text: str) -> dict[int, int]:
    """{task: exit code} from srun's 'srun: error: <host>: task(s) <ids>: ...' lines (-9 Killed,
    -15 Terminated, -1 another signal)."""
    codes = {}
    for _, spec, how in TASK_FAIL.findall(text):
        code = int(how.split()[-1]) if how.startswith("Exited") else _SIGNALLED.get(how, -1)
        codes.update(dict.fromkeys(_task_ids(spec), code))
    return codes


def task_hosts(output: str) -> dict[int, str]:
    """{task: node} from the same srun lines."""
    return {t: host for host, spec, _ in TASK_FAIL.findall(output) for t in _task_ids(spec)}


def task_lines(text: str, task: int, n: int = 10) -> list[str]:
    """The last `n` lines task `task` wrote (srun --label prefixed them with '<task>: ')."""
    return [m.group(2) for line in text.splitlines()
            if (m := LABEL.match(line)) and int(m.group(1)) == task][-n:]


def failed_tasks(text: str) -> list[int]:
    """The tasks to blame (dltutor.launch.results.blame_ranks): not those whose last lines show they only
    lost a peer, nor those srun terminated after another failed, unless nothing else is left."""
    return blame_ranks(task_failures(text), lambda t: "\n".join(task_lines(text, t, 20)))


def _out(*cmd) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout if r.returncode == 0 else ""


def _fields(text: str) -> dict:
    return dict(re.findall(r"(\S+?)=(\S*)", text))


def _short(host: str) -> str:
    return host.split(".")[0]


def hostnames(nodelist: str) -> list[str]:
    """`scontrol show hostnames` of a Slurm node list ('node[1-2]' -> ['node1', 'node2'])."""
    return _out("scontrol", "show", "hostnames", nodelist).split() if nodelist else []


def job_nodes(job_id) -> list[str]:
    """The nodes Slurm gave the job (while it runs; empty once Slurm requeued it)."""
    nodelist = _fields(_out("scontrol", "show", "job", "-o", str(job_id))).get("NodeList", "")
    return hostnames(nodelist) if nodelist not in ("", "(null)") else []


def node_state(node: str) -> tuple[str, str]:
    """(State, Reason) of a node as `scontrol show node` has them ('DOWN+NOT_RESPONDING',
    'Not responding'); ('', '') when Slurm does not answer."""
    text = _out("scontrol", "show", "node", "-o", node)
    reason = re.search(r"Reason=(.*?)(?: \[[^\]]*\])?(?: \w+=|$)", text)
    return _fields(text).get("State", ""), (reason.group(1).strip() if reason else "")


def ranks_on_hosts(output: str) -> dict[str, list[int]]:
    """{host: [ranks]} from the job's `ranks on hosts: node1 [0], node2 [1] (...)` line, else {}."""
    m = _HOSTS_LINE.search(output)
    if not m:
        return {}
    return {host: [int(r) for r in ranks.split(",")] for host, ranks in _HOST_RANKS.findall(m.group(1))}


def lost_nodes(output: str, job_nodes_seen=()) -> list[str]:
    """The nodes srun reported failing, then the job's other nodes Slurm has DOWN or NOT_RESPONDING."""
    named = list(dict.fromkeys(_NODE_FAILURE.findall(output)))
    return named + [n for n in job_nodes_seen if n not in named
                    and any(part in node_state(n)[0] for part in LOST)]


def _ranks(ranks) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _ranks_text(node: str, by_host: dict) -> tuple[list[int], str]:
    ranks = [r for host, rs in by_host.items() if _short(host) == _short(node) for r in rs]
    if not by_host:
        return [], (f"which ranks ran on {node} is not known: the job printed no 'ranks on hosts' "
                    "line (dltutor.core.dist.print_hosts)")
    if not ranks:
        return [], f"no rank ran on {node}"
    return ranks, f"{_ranks(ranks)} ran on {node}"


def node_failure(output: str, state: str, job_nodes_seen=()) -> tuple[list[int], str] | None:
    """(ranks that ran on the lost nodes, one sentence) when Slurm lost a node of the job, else None."""
    nodes = lost_nodes(output, job_nodes_seen)
    if not nodes and state not in ("NODE_FAIL", "REQUEUED"):
        return None
    if not nodes:
        return [], (f"Slurm ended it {state} and names no failed node: see `sinfo -R` and "
                    "`scontrol show job` for why")
    by_host, ranks, parts = ranks_on_hosts(output), [], []
    for node in nodes:
        st, reason = node_state(node)
        on, text = _ranks_text(node, by_host)
        ranks += on
        slurm = (f"Slurm has it {st}" + (f", reason '{reason}'" if reason else "")) if st \
            else "Slurm names it"
        parts.append(f"node {node} failed ({slurm}); {text}")
    where = ", ".join(f"{h} {rs}" for h, rs in by_host.items())
    others = f" (the job printed: ranks on hosts: {where})" if by_host else ""
    return ranks, ("; ".join(parts) + others + "." +
                   f" Resubmit once `sinfo -n {','.join(nodes)}` shows it idle, or without it: "
                   f"sbatch --exclude={','.join(nodes)}")


def _asked_per_node(job: dict) -> int:
    """CPUs per node the job asks: tasks per node x CPUs per task, else its CPUs over its nodes."""
    per_task = int(job.get("CPUs/Task") or 1)
    tasks = (job.get("NtasksPerN:B:S:C") or "0").split(":")[0]
    if tasks.isdigit() and int(tasks) > 0:
        return int(tasks) * per_task
    nodes = max(1, int(re.sub(r"\D.*", "", job.get("NumNodes") or "1") or 1))
    return -(-int(re.sub(r"\D.*", "", job.get("NumCPUs") or "0") or 0) // nodes)


def never_starts(job_id) -> str | None:
    """The message for a PENDING job that can never start, else None: Slurm's Reason is one waiting
    does not clear (NEVER_CLEARS) and the job asks more CPUs per node than any node of its
    partition has, or more nodes than the partition has (`sinfo`, whatever their state)."""
    job = _fields(_out("scontrol", "show", "job", "-o", str(job_id)))
    reason = job.get("Reason", "")
    if job.get("JobState") != "PENDING" or reason not in NEVER_CLEARS:
        return None
    part = job.get("Partition", "")
    rows = [ln.split() for ln in _out("sinfo", "-h", "-N", "-p", part, "-o", "%N %c").splitlines()]
    cpus = {n: int(c) for n, c in rows if c.isdigit()}
    asked_nodes = int(re.sub(r"\D.*", "", job.get("NumNodes") or "1") or 1)
    per_node = _asked_per_node(job)
    if not cpus or (per_node <= max(cpus.values()) and asked_nodes <= len(cpus)):
        return None
    have = ", ".join(f"{n} {c}" for n, c in cpus.items())
    return (f"Slurm job {job_id} can never start: Slurm keeps it PENDING (Reason={reason}): it asks "
            f"{asked_nodes} node(s) with {per_node} CPU(s) each (tasks per node x CPUs per task), "
            f"and partition {part} has {len(cpus)} node(s) with CPUs: {have} (sinfo). Ask for fewer "
            "tasks or CPUs per node (--ntasks-per-node, --cpus-per-task) or fewer nodes.")


def known_cause(output: str, tasks) -> tuple[int, str] | None:
    """(task, one line) for the first of `tasks` whose lines show a known rendezvous failure (a port
    already taken: torch's EADDRINUSE, worded as one that only lost its peer), with its node."""
    for task in tasks:
        lines = [ln for ln in output.splitlines() if ln.lstrip().startswith(f"{task}:")]
        m = next((m for ln in reversed(lines) if (m := _PORT_IN_USE.search(ln))), None)
        if m:
            port, host = m.group(1) or m.group(2), task_hosts(output).get(task, "its node")
            what = f"the job's MASTER_PORT {port}" if f"MASTER_PORT={port}" in output else f"port {port}"
            return task, (f"task {task} on {host} could not listen on port {port} (EADDRINUSE): "
                          f"something else already listens on {what} on {host}, so the rendezvous "
                          "cannot be hosted there. Give the job another MASTER_PORT.")
    return None


def job_error(job_id, state, code, output, nodes=()) -> SlurmError:
    """The SlurmError of a job that ended `state`: a node Slurm lost and the ranks that ran on it
    (node_failure; `nodes`: the job's nodes), else the tasks srun names
    (failed_tasks) with a known rendezvous cause (known_cause) and their last lines."""
    lost = node_failure(output, state, nodes)
    if lost:
        tail = "\n".join(output.splitlines()[-10:])
        how = ("lost a node and Slurm requeued it to run again from the start" if state == "REQUEUED"
               else f"ended {state}")
        return SlurmError(f"Slurm job {job_id} {how}: {lost[1]}; last lines:\n{tail}",
                          job_id, state, lost[0], output)
    bad = failed_tasks(output)
    cause = known_cause(output, bad + sorted(set(task_failures(output)) - set(bad)))
    bad = [cause[0]] if cause else bad
    who = f"task(s) {', '.join(map(str, bad))} failed" if bad else "no task named by srun"
    tail = "\n".join(task_lines(output, bad[0]) if bad else output.splitlines()[-10:])
    return SlurmError(f"Slurm job {job_id} ended {state} (exit {code}): {who}"
                      f"{': ' + cause[1] if cause else ''}; last lines:\n{tail}",
                      job_id, state, bad, output)
