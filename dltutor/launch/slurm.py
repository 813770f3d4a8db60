"""Slurm from the kernel: srun steps, batch jobs (submit, poll, stream, cancel), clear errors.

    result = run_batch("course/labs/02_ddp/train.py", tasks_per_node=2)   # site='local' by default
    result.metrics      # one dict per rank, from the DLTUTOR_METRICS lines of the job's output

In an allocation (Jupyter is a Slurm job) `srun_command` builds an `srun --overlap` step; outside,
`run_batch` renders a script from a site profile (dltutor.launch.sites), `sbatch --parsable`s it, polls
scontrol/sacct/squeue and streams the output file; every wait has a timeout, an interrupt or a
timeout cancels the job; without Slurm it returns the script and why it did not submit.
`SlurmBackend` plugs this into dltutor.launch.run. Kernel-side only: never reads rank variables.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from dltutor.launch import job_faults
from dltutor.launch.backends import Backend
from dltutor.launch.job_faults import (TASK_FAIL as _TASK_FAIL, SlurmError, failed_tasks,  # noqa: F401
                                       job_error, task_failures, task_lines)
from dltutor.launch.nodes import allocation_nodes, in_allocation
from dltutor.launch.srun_lines import LABEL as _LABEL, Rejoiner, rejoin
from dltutor.launch.sites import render_job

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED",
            "REQUEUED"}   # a run that ended (a node failed) and that Slurm queued again: job_state
_METRICS = re.compile(r"DLTUTOR_METRICS (\{.*\})\s*$")


def srun_command(script, ntasks: int, args=(), overlap: bool = True, python: str | None = None,
                 nodes: int | None = None) -> list[str]:
    """`srun` argv for `ntasks` ranks of `script`; `--overlap` shares the Jupyter step's CPUs."""
    cmd = ["srun", "--ntasks", str(int(ntasks)), "--label", "--kill-on-bad-exit=1"]
    cmd += (["--nodes", str(nodes)] if nodes else []) + (["--overlap"] if overlap else [])
    return cmd + [python or sys.executable, "-u", str(script), *map(str, args)]


def _run(cmd, timeout=30, cwd=None):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(cmd, 255, "", str(exc))


def submit(job_text: str, workdir, name: str = "job") -> str:
    """Write `job_text` to `<workdir>/<name>.sbatch`, `sbatch --parsable` it there; the job id."""
    unset = sorted(set(re.findall(r"\$\{(DLTUTOR_\w+)\}", job_text)))
    if unset:
        raise SlurmError(f"the job script still holds ${{{unset[0]}}}: export {unset[0]}=... "
                         "(your project/account) before submitting")
    path = Path(workdir) / f"{name}.sbatch"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(job_text)
    r = _run(["sbatch", "--parsable", str(path)], timeout=60, cwd=path.parent)
    if r.returncode != 0 or not r.stdout.strip():
        raise SlurmError(f"sbatch refused {path}: {(r.stderr or r.stdout).strip()}")
    return r.stdout.strip().split(";")[0]


def job_state(job_id) -> tuple[str, str]:
    """(STATE, exit code 'a:b') from scontrol, else sacct, else squeue; ('UNKNOWN', '') if none knows."""
    r = _run(["scontrol", "show", "job", "-o", str(job_id)])
    if r.returncode == 0 and "JobState=" in r.stdout:
        fields = dict(re.findall(r"(\w+)=(\S*)", r.stdout))
        if fields["JobState"] in ("PENDING", "REQUEUED") and fields.get("Restarts", "0") != "0":
            return "REQUEUED", fields.get("ExitCode", "")   # its run ended; Slurm queued it again
        return fields["JobState"], fields.get("ExitCode", "")
    r = _run(["sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "State,ExitCode"])
    rows = [ln for ln in r.stdout.splitlines() if "|" in ln] if r.returncode == 0 else []
    if rows:   # without slurmdbd sacct says "accounting storage is disabled": fall through
        return rows[0].split("|")[0].split()[0].rstrip("+"), rows[0].split("|")[1]
    r = _run(["squeue", "-h", "-j", str(job_id), "-o", "%T"])
    return (r.stdout.split()[0], "") if r.returncode == 0 and r.stdout.strip() else ("UNKNOWN", "")


def poll(job_id, timeout: float = 600, interval: float = 0.5) -> tuple[str, str]:
    """(STATE, exit code) at the end of the job ('UNKNOWN' if no command knows it, 3 tries in a row;
    'REQUEUED' when its run ended and Slurm queued it again: `cancel` it or poll on); TimeoutError
    after `timeout` s, SlurmError when it can never start (job_faults.never_starts): the job left
    in the queue (`cancel` it)."""
    deadline, unknown = time.monotonic() + timeout, 0
    while True:
        state, code = job_state(job_id)
        unknown = unknown + 1 if state == "UNKNOWN" else 0
        if state == "PENDING" and (why := job_faults.never_starts(job_id)):
            raise SlurmError(why, job_id, state)
        if state in TERMINAL or unknown >= 3:
            return state, code
        if time.monotonic() > deadline:
            raise TimeoutError(f"Slurm job {job_id} still {state} after {timeout:.0f} s")
        time.sleep(interval)


def stream_output(path, until_done, on_line=print, timeout: float = 600,
                  interval: float = 0.5, grace: float = 10.0) -> str:
    """Tail `path` (it may not exist yet), calling `on_line` per line until `until_done()` is true;
    then read the rest (waiting up to `grace` s for a late file) and return the whole text.
    TimeoutError after `timeout` s."""
    path, pos, buf, text, deadline = Path(path), 0, "", [], time.monotonic() + timeout

    def read():
        nonlocal pos, buf
        if path.exists():
            with open(path, "r", errors="replace") as fh:
                fh.seek(pos)
                buf, pos = buf + fh.read(), fh.tell()
            *lines, buf = buf.split("\n")
            for line in lines:
                text.append(line)
                on_line(line)

    while not until_done():
        read()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the job writing {path} did not finish within {timeout:.0f} s")
        time.sleep(interval)
    end = time.monotonic() + grace
    while not path.exists() and time.monotonic() < end:
        time.sleep(interval)
    read()
    if buf:
        text.append(buf)
        on_line(buf)
    return "\n".join(text)


def cancel(job_id) -> None:
    """`scancel` the job (quietly: it may have ended already)."""
    _run(["scancel", str(job_id)], timeout=30)


def parse_metrics(text: str) -> list[dict]:
    """The `DLTUTOR_METRICS {json}` records in a job's output, sorted by rank."""
    found = [json.loads(m.group(1)) for line in rejoin(text) if (m := _METRICS.search(line))]
    return sorted(found, key=lambda r: r.get("rank", 0))


@dataclass
class JobResult:   # submitted=False: `script` was not submitted, `reason` says why
    submitted: bool
    script: str
    reason: str = ""
    job_id: str | None = None
    state: str | None = None
    exit_code: str | None = None
    wall_time: float = 0.0
    output: str = ""
    metrics: list = field(default_factory=list)
    path: Path | None = None

    @property
    def returncode(self) -> int:
        return 0 if self.state == "COMPLETED" else 1


def run_batch(script, nodes: int = 1, tasks_per_node: int = 2, args=(), site="local",
              time_limit: str = "00:10:00", workdir=None, timeout: float = 600,
              on_line=print, job_name: str = "dltutor") -> JobResult:
    """Submit `script` as a batch job, stream its output, wait, parse metrics. Without `sbatch` here:
    the script and the reason, unsubmitted. Failure: SlurmError naming the tasks; interrupt/timeout: scancel."""
    text = render_job(site, Path(script).resolve(), nodes, tasks_per_node, args, time_limit,
                      job_name, output="%x-%j.out")
    if shutil.which("sbatch") is None:
        return JobResult(False, text, "no `sbatch` on this machine (not a Slurm login/compute node): "
                         "here is the job script; copy it to your cluster and run `sbatch job.sbatch`")
    from dltutor.core import env
    workdir = Path(workdir) if workdir else env.user_dir() / "jobs" / time.strftime("%Y%m%d-%H%M%S")
    start = time.monotonic()
    job_id = submit(text, workdir, job_name)
    path = workdir / f"{job_name}-{job_id}.out"
    on_line(f"submitted Slurm job {job_id}; output: {path}")
    status = {"unknown": 0}

    def done():   # like poll(): a job no command knows (3 answers in a row) has ended
        state, code = job_state(job_id)
        status.update(state=state, code=code, unknown=status["unknown"] + 1 if state == "UNKNOWN" else 0)
        if state == "PENDING" and (why := job_faults.never_starts(job_id)):
            raise SlurmError(why, job_id, state)   # cancelled below
        if state == "RUNNING" and not status.get("nodes"):
            status["nodes"] = job_faults.job_nodes(job_id)   # to name a node that fails later
        return state in TERMINAL or status["unknown"] >= 3

    try:
        output = stream_output(path, done, on_line, timeout=timeout)
    except BaseException:   # KeyboardInterrupt from a cell, TimeoutError, SIGTERM from a launcher
        cancel(job_id)
        on_line(f"cancelled Slurm job {job_id}")
        raise
    res = JobResult(True, text, "", job_id, status["state"], status["code"],
                    time.monotonic() - start, output, parse_metrics(output), path)
    if res.state == "REQUEUED":   # its run failed; a rerun from the start would overwrite the output
        cancel(job_id)
        on_line(f"cancelled Slurm job {job_id}: Slurm had requeued it after the failure")
    if res.state != "COMPLETED":
        raise job_error(job_id, res.state, res.exit_code, output, status.get("nodes", ()))
    return res



class SlurmBackend(Backend):
    """launch(backend='slurm'): `srun --overlap` in an allocation of `nodes` nodes, else a job of its own
    (`python -m dltutor.launch.slurm batch`, site $DLTUTOR_SITE or 'local'); a timeout scancels it."""
    name = "slurm"
    needs_port = True   # inside an allocation: MASTER_PORT for the step (rank 0 on the kernel's node)
    local = False       # keep the job's SLURM_* variables; srun sets each task's own

    def __init__(self, site: str | None = None, nodes: int = 1, time_limit: str = "00:10:00"):
        self.site, self.nodes, self.time_limit, self._joiner = site, int(nodes), time_limit, Rejoiner()

    def on_nodes(self, nodes):
        return SlurmBackend(self.site, nodes, self.time_limit)

    def check(self, nproc):
        if self.nodes < 1 or nproc < 1 or nproc % self.nodes:
            raise ValueError(f"nproc={nproc} ranks do not split evenly over {self.nodes} node(s)")

    def command(self, script, nproc, args, *, port, log_dir, python=sys.executable):
        self._joiner = Rejoiner()   # a new launch: no piece of an earlier one is held
        if in_allocation() and self.nodes <= allocation_nodes():   # a step of this job
            return srun_command(script, nproc, args, True, python, self.nodes), \
                {"MASTER_PORT": str(port)} if port else {}
        site = self.site or os.environ.get("DLTUTOR_SITE", "local")
        return [python, "-u", "-m", "dltutor.launch.slurm", "batch", "--site", site, "--nodes",
                str(self.nodes), "--tasks-per-node", str(nproc // self.nodes), "--timeout", "86400",
                "--time", self.time_limit, "--workdir", str(Path(log_dir) / "slurm"), str(script),
                *map(str, args)], {}

    def split(self, line):
        whole = self._joiner.feed(line)   # None: a piece of a longer line, held
        m = _LABEL.match(line if whole is None else whole)
        return (int(m.group(1)), None if whole is None else m.group(2)) if m else (None, whole)

    def failures(self, launcher_text):
        return task_failures(launcher_text)

    def failure_seen(self, line):
        return bool(_TASK_FAIL.search(line))


def main(argv=None) -> int:
    """`python -m dltutor.launch.slurm render|batch ...`: print a job script, or run one and stream it."""
    import argparse, signal  # noqa: E401
    p = argparse.ArgumentParser(prog="python -m dltutor.launch.slurm",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("action", choices=["render", "batch"])
    for flag, kind, default in (("--site", str, "local"), ("--nodes", int, 1), ("--time", str, "00:10:00"),
                                ("--tasks-per-node", int, None), ("--timeout", float, 600.0),
                                ("--workdir", str, None), ("--account", str, None),
                                ("--queue", str, None), ("--launcher", str, None)):
        p.add_argument(flag, type=kind, default=default, help=" ")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.action == "render":
        try:
            print(render_job(a.site, a.script, a.nodes, a.tasks_per_node, a.args, a.time,
                             launcher=a.launcher, account=a.account, queue=a.queue))
        except ValueError as exc:
            print(f"dltutor.launch.slurm: {exc}", file=sys.stderr)
            return 2
        return 0
    signal.signal(signal.SIGTERM, signal.default_int_handler)   # a launcher's kill cancels the job
    try:
        res = run_batch(a.script, a.nodes, a.tasks_per_node, a.args, a.site, a.time, a.workdir,
                        a.timeout, on_line=lambda s: print(s, flush=True))
    except (SlurmError, KeyboardInterrupt) as exc:
        print(f"dltutor.launch.slurm: {exc or 'interrupted; the job was cancelled'}", file=sys.stderr, flush=True)
        return 1 if isinstance(exc, SlurmError) else 130
    if not res.submitted:   # the script on stdout (`> job.sbatch`), the reason on stderr
        print(res.script)
        print(f"dltutor.launch.slurm: not submitted: {res.reason}", file=sys.stderr)
    return 0 if res.submitted else 2


if __name__ == "__main__":
    sys.exit(main())
