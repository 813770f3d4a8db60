"""A rank that dies, and a job that starts again: kills on purpose, and torchrun with restarts.

    restart_count()                 the attempt: torchrun's TORCHELASTIC_RESTART_COUNT plus the
                                    course launcher's DLTUTOR_RESTART_COUNT (0: the first attempt)
    failure_plan(mtbf_s, seed, attempt, world_size)   when (s) and which rank a seeded random
                                    failure kills in this attempt: exponential times, mean mtbf_s
    note_restart(root, ...), read_restarts(root)   one line per restart in root/restarts.jsonl
    startup_s()                     seconds since launch(max_restarts=N) started this attempt
    kill_now(root, step, rank)      write the kill time beside the checkpoints, then SIGKILL self
    TornWriter(path, root, step)    a DCP writer that SIGKILLs its process after the shards and
                                    before `.metadata`: a save killed mid-write, a torn folder
    read_kill(root)                 what the killed rank wrote ({"step", "rank", "time", "where"})
    torchrun(script, nproc, args, max_restarts=1)   a real `torchrun --max-restarts N` run;
                                    returns {"rc", "metrics" by rank, "launcher" text}

Why TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (RESTART_ENV): by default torchrun's c10d rendezvous
shares its TCP store with the workers, and the keys of the first attempt are still in it when the
second attempt starts; its gloo mesh then fails with `Gloo connectFullMesh failed ... Connection
refused`, or hangs (upstream pytorch issue 135712). Measured on this course's 2-core machine
without the variable: 3 of 6 restarts failed (the course's development notes, torch 2.14.1),
and 4 of 6 of lab 10's `--kill-at 5` (2 that error, 2 hung past 60 s); with it 0 of 6 in both.
In torch 2.14.1 the variable is read in torch/distributed/elastic/rendezvous/dynamic_rendezvous.py,
that is by the c10d rendezvous only: `torchrun` here uses `--rdzv-backend c10d`.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from torch.distributed.checkpoint import FileSystemWriter

import numpy as np

from dltutor.core.dist import RANK_ENV, free_port, read_report
from dltutor.launch.processes import TAG_ENV, tagged_processes
from dltutor.launch.restart import ATTEMPT_T0_ENV, RESTART_COUNT_ENV

KILL_FILE = "killed.json"             # beside the step-N folders (checkpoints() ignores it)
RESTARTS_FILE = "restarts.jsonl"      # one line per restart, beside them too
RESTART_ENV = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}   # torchrun: pytorch issue 135712


def restart_count(environ=None) -> int:
    """How often this job's ranks were started again: by torchrun (TORCHELASTIC_RESTART_COUNT)
    plus by the course's launch(max_restarts=N) (DLTUTOR_RESTART_COUNT); 0 on the first attempt."""
    environ = os.environ if environ is None else environ
    return (int(environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # torchrun:
            + int(environ.get(RESTART_COUNT_ENV, "0")))          # launch(max_restarts=N):


def failure_plan(mtbf_s: float, seed: int, attempt: int, world_size: int) -> tuple[float, int]:
    """(seconds into the attempt, rank): when and where attempt `attempt` fails. The time is an
    exponential draw with mean `mtbf_s` (failures as a Poisson process: memoryless, so a fresh
    draw per attempt), the rank uniform; both from numpy's generator seeded by (seed, attempt),
    so every rank computes the same plan and a rerun gets the same failures."""
    rng = np.random.default_rng([int(seed), int(attempt)])
    return float(rng.exponential(mtbf_s)), int(rng.integers(world_size))


def startup_s(environ=None) -> float | None:
    """Seconds since launch(max_restarts=...) started this attempt (its ATTEMPT_T0_ENV); None
    in a launch without it (a warm-start rank may be forked before its launch: no process clock)."""
    t0 = (os.environ if environ is None else environ).get(ATTEMPT_T0_ENV)
    return None if t0 is None else time.time() - float(t0)


def note_restart(root, record: dict) -> None:
    """Append one restart's record (killed step, resumed step, kill -> training seconds) to
    root/RESTARTS_FILE: killed.json holds only the last kill, this keeps them all."""
    with open(Path(root) / RESTARTS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def read_restarts(root) -> list[dict]:
    """Every record `note_restart` wrote under root, oldest first ([] if none)."""
    path = Path(root) / RESTARTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.is_file() else []


def kill_now(root, step: int, rank: int, where: str = "after the optimizer step") -> None:
    """Write {step, rank, time (epoch seconds), where} to `root/killed.json`, then SIGKILL this
    process: no handler, no cleanup, as when a node's OOM killer or a failing host takes it."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (KILL_FILE + ".tmp")
    tmp.write_text(json.dumps({"step": int(step), "rank": int(rank), "time": time.time(),
                               "where": where}))
    tmp.replace(root / KILL_FILE)       # whole or absent, never half a file
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def read_kill(root) -> dict | None:
    """What `kill_now` wrote under `root`, or None."""
    path = Path(root) / KILL_FILE
    return json.loads(path.read_text()) if path.is_file() else None


class TornWriter(FileSystemWriter):
    """DCP's file writer, except that the coordinator (rank 0, which writes `.metadata` last)
    kills itself once every rank's shards are written and before `.metadata` is: the folder is
    left with its `__<rank>_0.distcp` files and no `.metadata`, a save that did not finish."""

    def __init__(self, path, root, step: int, rank: int):
        super().__init__(str(path))
        self.kill_root, self.kill_step, self.kill_rank = root, step, rank

    def finish(self, metadata, results) -> None:
        kill_now(self.kill_root, self.kill_step, self.kill_rank, where="inside the save, before .metadata")


def torchrun_command(script, nproc: int, args, *, port: int, log_dir, max_restarts: int = 1,
                     python: str = sys.executable) -> list[str]:
    """`python -m torch.distributed.run` with the c10d rendezvous on 127.0.0.1 and restarts
    (every flag is one torch 2.11 and 2.14 both know)."""
    return [python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--max-restarts", str(max_restarts),  # torchrun: start all ranks again, N times at most
            "--log-dir", str(log_dir), "--tee", "3", str(script), *map(str, args)]


def torchrun(script, nproc: int, args, *, log_dir, max_restarts: int = 1, timeout: float = 300.0,
             env=None) -> dict:
    """Run `script` under torchrun with restarts and RESTART_ENV; {"rc": exit code, "metrics":
    {rank: the last DLTUTOR_METRICS record of that rank}, "launcher": torchrun's own lines,
    "output": every line}. After `timeout` seconds torchrun and its workers (a session of their
    own) are killed and TimeoutError says so with the last lines."""
    cmd = torchrun_command(script, nproc, args, port=free_port(), log_dir=log_dir,
                           max_restarts=max_restarts)
    tag = uuid.uuid4().hex[:12]
    child = {k: v for k, v in os.environ.items() if k not in RANK_ENV}   # no inherited rank
    child.update(RESTART_ENV, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **{TAG_ENV: tag},
                 TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]:", **(env or {}))
    proc = subprocess.Popen(cmd, env=child, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tagged(tag, proc)
        text, _ = proc.communicate()
        raise TimeoutError(f"torchrun ran past {timeout:.0f} s and was killed with its workers; "
                           f"its last lines:\n{text[-3000:]}") from None
    finally:
        _kill_tagged(tag, proc)               # workers live in sessions of their own
    lines = text.splitlines()
    metrics, launcher = {}, []
    for line in lines:
        rank, text = _split(line)
        record = read_report(text) if rank is not None else None
        if record is not None:
            metrics[rank] = {"rank": rank, **record}
        elif rank is None:
            launcher.append(line)
    return {"rc": proc.returncode, "metrics": metrics, "launcher": "\n".join(launcher),
            "output": "\n".join(lines), "cmd": cmd}


def _kill_tagged(tag: str, proc) -> None:
    """SIGKILL torchrun (if still running) and every process that carries our tag."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    for p in tagged_processes(tag):
        with contextlib.suppress(psutil.Error):
            p.kill()


def _split(line: str) -> tuple[int | None, str]:
    """(rank, text) of a `[rankN]:text` line torchrun's --tee wrote; (None, line) otherwise."""
    if line.startswith("[rank") and "]:" in line:
        head, text = line.split("]:", 1)
        if head[5:].isdigit():
            return int(head[5:]), text
    return None, line
