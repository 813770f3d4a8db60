"""The reaper: when the process that started a launch dies, every process of the launch dies too.

A kernel restart, a cull by the hub or a crash SIGKILLs the kernel: it cannot clean up, and
torchrun, horovodrun or an `srun` step it started would keep running (and keep the GPUs) until the
job ends. `dltutor.launch.run` therefore starts one small reaper per launch, in a session of its
own and without the launch's tag:

    python -m dltutor.launch.reaper <kernel pid> <kernel start time> <launch tag>

Every POLL seconds it checks that the kernel still runs (same pid *and* start time, so a reused
pid does not fool it). Once the kernel is gone it SIGTERMs every process that carries the launch's
tag (the Slurm wrapper uses the grace to `scancel` its job), SIGKILLs what is left after GRACE
seconds, and exits. The launch ends the reaper itself when it finishes normally.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil

from dltutor.launch.processes import TAG_ENV, tagged_processes

POLL = 0.5    # s between checks of the kernel
GRACE = 3.0   # s between SIGTERM and SIGKILL


def start(tag: str, env: dict) -> subprocess.Popen:
    """Start the reaper of launch `tag` for this process (`env`: the launch's, without the tag)."""
    me = psutil.Process()
    clean = {k: v for k, v in env.items() if k != TAG_ENV}
    return subprocess.Popen([sys.executable, "-m", "dltutor.launch.reaper", str(me.pid),
                             repr(me.create_time()), tag], env=clean, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def alive(pid: int, started: float) -> bool:
    """True while the process `pid`, started at `started` (psutil create_time), still runs."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - started) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_launch(tag: str) -> int:
    """SIGTERM, then SIGKILL, every process tagged `tag`; returns how many there were."""
    procs = tagged_processes(tag)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass
        _, procs = psutil.wait_procs(procs, timeout=GRACE)
        procs += [p for p in tagged_processes(tag) if p not in procs]
        if not procs:
            break
    return len(procs)


def watch(pid: int, started: float, tag: str) -> None:
    while alive(pid, started):
        time.sleep(POLL)
    end_launch(tag)


if __name__ == "__main__":
    watch(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])
