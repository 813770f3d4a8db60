"""Lab 10's batch jobs on a real Slurm: a time limit mid-training (requeue), a node lost mid-training.

    job = submit_requeue(workdir)      # returns at once: sbatch of course/labs/10_checkpoint/requeue.sbatch
    loss = submit_node_loss(workdir)   # 2 nodes; a thread kills node2 mid-training, revives it later
    ...other cells...
    out = collect(job, timeout=600)    # waits for the end (through the requeue), reads the log
    out["segments"]   # one per run of the job: restart_count, first_step, last_step, resumed_from,
                      # stop (SIGUSR1 / SIGTERM / "node failure" / "completed"), exit status, ranks
    out["log_lines"]  # the lines of the one log that show the segments; out["param_digest"]: final
    reference(workdir)                 # the same training uninterrupted, 2 local ranks: its digest

The job scripts are the lab's own files; submit_* pins the values the script reads from the
environment (python, lab, checkpoint folder, train.py arguments) into the copy it submits, and
uses dltutor.launch.slurm (submit, job_state, parse_metrics): no Slurm plumbing of its own. The node
loss uses the course's test cluster (scripts/slurm_local.sh kill-node / revive-node node2).
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from dltutor.checkpoint import store
from dltutor.core import course
from dltutor.launch import slurm
from dltutor.launch.job_faults import SlurmError

TRAIN_ARGS = ("--tiny", "--steps", "140", "--save-every", "10")   # the same run in every job here
PACE = {"requeue": 0.5, "node_loss": 0.25}   # s per step: only so that the event falls mid-training
SCRIPT = {"requeue": "requeue.sbatch", "node_loss": "node_loss.sbatch"}
_SEGMENT = re.compile(r"^segment (\d+) of job (\d+) on (\S+)")
_SHOWS = re.compile(r"^(segment \d|batch shell:|srun: error: Node failure|\d+: \[rank 0\] (resumed|no "
                    r"checkpoint|SIG\w+: stopped|each step paced|CPU|GPU)|slurmstepd.*(CANCELLED|REQUEUE))")


@dataclass
class Job:
    kind: str               # "requeue" or "node_loss"
    job_id: str
    workdir: Path
    ckpt_dir: Path
    log: Path
    events: dict = field(default_factory=dict)   # node_loss: what the driver thread did, and when
    driver: threading.Thread | None = None


def _check_slurm():
    """One clear line when no Slurm answers here."""
    if shutil.which("sbatch") is None:
        raise SlurmError("no Slurm here (no `sbatch` on PATH): start the course's test cluster with "
                         "`bash scripts/slurm_local.sh start --nodes 2` (after `bash scripts/setup.sh --test`)")
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        r = subprocess.CompletedProcess([], 1, "", "sinfo did not answer within 30 s")
    if r.returncode != 0:
        msg = (r.stderr.strip().splitlines() or ["no answer"])[-1]
        raise SlurmError(f"Slurm does not answer (sinfo: {msg}): start the course's test cluster with "
                         "`bash scripts/slurm_local.sh start --nodes 2` and `eval $(bash scripts/slurm_local.sh env)`")


def job_text(kind: str, ckpt_dir, pace: float, args=TRAIN_ARGS, python: str | None = None,
             nodelist: str | None = None) -> str:
    """The lab's job script with the values it reads from the environment pinned after its
    #SBATCH lines (so the job runs the same when Slurm requeues it, whatever the environment);
    `nodelist`: an #SBATCH --nodelist line (keep the job off a node another job will lose)."""
    text = course.lab(f"10_checkpoint/{SCRIPT[kind]}").read_text()
    pins = {"DLTUTOR_PYTHON": python or sys.executable,
            "DLTUTOR_LAB": str(course.lab("10_checkpoint/train.py")),
            "DLTUTOR_CKPT_DIR": str(Path(ckpt_dir).resolve()),
            "DLTUTOR_TRAIN_ARGS": " ".join(map(str, args)),
            "DLTUTOR_PACE": str(pace)}
    block = (f"#SBATCH --nodelist={nodelist}\n" if nodelist else "") + \
        "# pinned by dltutor.checkpoint.batch.job_text\n" + "".join(
        f"export {k}={shlex.quote(v)}\n" for k, v in pins.items())
    lines = text.splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    return "".join(lines[:last + 1]) + block + "".join(lines[last + 1:])


def _submit(kind, workdir, pace, args, python, nodelist=None) -> Job:
    _check_slurm()
    workdir = Path(workdir).resolve()
    ckpt = workdir / f"ckpt-{kind}"
    if ckpt.exists():
        shutil.rmtree(ckpt)   # a fresh start: this job's own checkpoints only
    job_id = slurm.submit(job_text(kind, ckpt, pace, args, python, nodelist), workdir, kind)
    name = "ckpt-requeue" if kind == "requeue" else "ckpt-node-loss"
    return Job(kind, job_id, workdir, ckpt, workdir / f"{name}-{job_id}.out")


def submit_requeue(workdir, pace: float = PACE["requeue"], args=TRAIN_ARGS, python=None,
                   nodelist: str | None = None) -> Job:
    """sbatch requeue.sbatch (1-minute --time, --signal=B:USR1@5, --requeue); returns at once.
    `nodelist="node1"` keeps it beside a node-loss job that kills node2."""
    return _submit("requeue", workdir, pace, args, python, nodelist)


def submit_requeue_or_say(workdir, wanted: bool = True) -> tuple[Job | None, str]:
    """(the requeue job, "") or (None, one line: why it was not submitted)."""
    if not wanted:
        return None, ("not submitted: fast mode (the job takes about 2 minutes: a 1-minute --time, then "
                      "Slurm waits for the old credentials to expire before the requeued job starts); "
                      "full mode submits it, and the course's tests run it and a job that loses one of its "
                      "2 nodes (tests/test_checkpoint_slurm.py)")
    try:
        return submit_requeue(workdir), ""
    except SlurmError as exc:
        return None, f"not submitted: {exc}"


def _node(action: str, node: str) -> None:
    script = course.course_root().parent / "scripts" / "slurm_local.sh"   # the repository's
    if not script.is_file():
        raise SlurmError(f"no {script}: losing a node on purpose needs the course repository's test "
                         "cluster (scripts/slurm_local.sh)")
    r = subprocess.run(["bash", str(script), action, node], capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise SlurmError(f"slurm_local.sh {action} {node} failed: {(r.stderr or r.stdout).strip()}")


def _drive_node_loss(job: Job, node: str, after_step: int, timeout: float):
    """Kill `node` once a complete checkpoint of `after_step` or later exists; once Slurm has
    requeued the job, revive it. Records each event (and any error) in job.events."""
    ev, deadline = job.events, time.monotonic() + timeout
    try:
        while (newest := store.newest_complete(job.ckpt_dir)) is None or \
                int(newest.name.split("-")[1]) < after_step:
            state, _ = slurm.job_state(job.job_id)
            if state in slurm.TERMINAL or time.monotonic() > deadline:
                raise SlurmError(f"job {job.job_id} {state} before a checkpoint of step {after_step}")
            time.sleep(0.2)
        ev.update(killed_after_checkpoint=newest.name, killed_at=time.time())
        _node("kill-node", node)
        while (state := slurm.job_state(job.job_id)[0]) not in ("REQUEUED", "PENDING"):
            if state in slurm.TERMINAL - {"NODE_FAIL"} or time.monotonic() > deadline:
                raise SlurmError(f"job {job.job_id} {state} after {node} died, not requeued")
            time.sleep(0.5)
        ev.update(requeued_at=time.time())
    except BaseException as exc:   # noqa: BLE001 - reported by collect
        ev["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        if "killed_at" in ev:
            try:
                _node("revive-node", node)
                ev["revived_at"] = time.time()
            except SlurmError as exc:
                ev.setdefault("error", str(exc))


def submit_node_loss(workdir, pace: float = PACE["node_loss"], args=TRAIN_ARGS, node: str = "node2",
                     after_step: int = 20, python=None, timeout: float = 600) -> Job:
    """sbatch node_loss.sbatch (2 nodes x 1 rank, --requeue); returns at once. A thread kills
    `node` (every process on it) once the checkpoint of `after_step` is complete, and revives it once
    Slurm has requeued the job. Needs the course's test cluster of 2 nodes."""
    job = _submit("node_loss", workdir, pace, args, python)
    job.driver = threading.Thread(target=_drive_node_loss, args=(job, node, after_step, timeout),
                                  daemon=True)
    job.driver.start()
    return job


def wait_done(job: Job, timeout: float = 600) -> tuple[str, str]:
    """(state, exit code) once the job has ended for good: a requeued job is waited through."""
    deadline = time.monotonic() + timeout
    while True:
        state, code = slurm.job_state(job.job_id)
        if state in slurm.TERMINAL and state not in ("REQUEUED", "NODE_FAIL") or state == "UNKNOWN":
            return state, code
        if time.monotonic() > deadline:
            slurm.cancel(job.job_id)
            raise TimeoutError(f"Slurm job {job.job_id} still {state} after {timeout:.0f} s: cancelled")
        time.sleep(0.5)


def segments(text: str) -> list[dict]:
    """One dict per run of the job in its (appended) log: what each run did, from its lines and the
    ranks' metrics."""
    out, current = [], None
    for line in text.splitlines():
        if (m := _SEGMENT.match(line)):
            current = {"restart_count": int(m.group(1)), "nodes": m.group(3), "lines": []}
            out.append(current)
        if current is not None:
            current["lines"].append(line)
    for seg in out:
        seg_text = "\n".join(seg.pop("lines"))
        ranks = slurm.parse_metrics(seg_text)
        status = re.search(r"the training step ended with status (\d+)", seg_text)
        first = ranks[0] if ranks else {}
        stop = first.get("stop_signal") or ("completed" if ranks else
                                              "node failure" if "Node failure" in seg_text else "no metrics")
        seg.update(status=int(status.group(1)) if status else None, stop=stop,
                   resumed_from=first.get("resumed_from"), first_step=first.get("first_step"),
                   last_step=first.get("steps"), param_digest=first.get("param_digest"),
                   slurm_restart_count=first.get("slurm_restart_count"), ranks=ranks)
    return out


def collect(job: Job, timeout: float = 600) -> dict:
    """Wait for `job` to end (through its requeue), then what its one log shows: state, segments,
    the lines that show them, the final parameters' digest (the last segment's rank 0)."""
    state, code = wait_done(job, timeout)
    if job.driver is not None:
        job.driver.join(timeout=max(1.0, timeout))
    deadline = time.monotonic() + 30
    while not job.log.exists() and time.monotonic() < deadline:   # the log may land a moment late
        time.sleep(0.5)
    text = job.log.read_text(errors="replace") if job.log.exists() else ""
    segs = segments(text)
    done = [s for s in segs if s["stop"] == "completed"]
    return {"job_id": job.job_id, "kind": job.kind, "state": state, "exit_code": code,
            "segments": segs, "log": str(job.log), "events": dict(job.events),
            "log_lines": [ln for ln in text.splitlines() if _SHOWS.search(ln)],
            "param_digest": done[-1]["param_digest"] if done else None, "text": text}


def reference(workdir, args=TRAIN_ARGS, nproc: int = 2) -> dict:
    """The same training uninterrupted on `nproc` local ranks (dltutor.launch.run): rank 0's metrics."""
    from dltutor.launch.run import launch
    ckpt = Path(workdir).resolve() / "ckpt-reference"
    if ckpt.exists():
        shutil.rmtree(ckpt)
    res = launch(course.lab("10_checkpoint/train.py"), nproc=nproc, args=[*map(str, args), "--ckpt-dir",
                 str(ckpt)], log_dir=Path(workdir) / "reference-logs", echo=False)
    if res.returncode != 0 or not res.metrics:
        raise RuntimeError(f"the uninterrupted reference run failed (rc {res.returncode})")
    return res.metrics[0]
