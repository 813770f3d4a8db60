"""Batches of job scripts for the multi-node tests: submitted together, each read back once; and
the 1-node runs they are compared with, started on this machine while the jobs run.

All at once, not a few at a time: in `make test` the Slurm tests' worker is the longer of the two,
and three jobs at a time gave its jobs less of the 2 cores beside the other worker (the engines'
fixture in a full run: 179 s all at once, 225 s three at a time; alone on the machine 185 s and
180 s).
"""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from dltutor.launch import run, slurm


def run_time(job_id) -> str:
    """Slurm's own RunTime of the job (h:mm:ss, start to end on the nodes), while scontrol knows it."""
    out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True,
                         text=True, timeout=30).stdout
    m = re.search(r"RunTime=(\S+)", out)
    return m.group(1) if m else "?"


@contextlib.contextmanager
def exported(env: dict):
    """`env` in this process's environment (sbatch passes it on to the job) while inside."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def on_this_machine(script, nproc: int, args, log_dir: Path, timeout: float, env=None) -> dict:
    """A 1-node reference: the same lab, ranks and arguments on this machine, started as a notebook
    cell starts them (`launch()`, the warm start: the ranks are forked from a process that has
    torch imported, so none pays the import; tests/test_warm.py checks that they compute what
    torchrun's ranks compute, bit for bit). One thread per rank, as each Slurm task here has.
    `env` adds variables for the ranks. The keys of run_all's jobs (job_id None)."""
    t0 = time.monotonic()
    res = run.launch(script, nproc=nproc, args=list(args), backend="local", threads=1,
                     oversubscribe=True, echo=False, timeout=timeout, log_dir=log_dir, env=env)
    output = "\n".join(Path(p).read_text(errors="replace") for p in res.logs.values())
    return dict(job_id=None, state="COMPLETED", code="0:0", output=output, metrics=res.metrics,
                run_time=f"{time.monotonic() - t0:.1f} s from launch() (warm start)", script=None)


def run_all(scripts: dict, workdir: Path, timeout: float, env: dict | None = None,
            meanwhile=None) -> dict:
    """Submit every {name: job script} at once, wait for all; per name a dict of job_id, state,
    code, output, metrics, run_time, script. `env`: {name: {VAR: value}} exported for that job's
    sbatch. `meanwhile()`, called once the jobs are queued, returns more {name: dict} (the 1-node
    runs, on_this_machine). A job still running after `timeout` s fails the test; none is left."""
    env, running, done = env or {}, {}, {}
    deadline = time.monotonic() + timeout
    try:
        for name, text in scripts.items():
            with exported(env.get(name, {})):
                running[name] = slurm.submit(text, workdir, name)
        if meanwhile is not None:
            done.update(meanwhile())
        while running:
            for name, job_id in list(running.items()):
                state, code = slurm.job_state(job_id)
                if state in slurm.TERMINAL:
                    output = (workdir / f"{name}-{job_id}.out").read_text(errors="replace")
                    done[name] = dict(job_id=job_id, state=state, code=code, output=output,
                                      metrics=slurm.parse_metrics(output), run_time=run_time(job_id),
                                      script=scripts[name])
                    del running[name]
            if running and time.monotonic() > deadline:
                pytest.fail(f"jobs still running after {timeout} s: {sorted(running)}", pytrace=False)
            time.sleep(0.5)
    finally:
        for job_id in running.values():
            slurm.cancel(job_id)
    return done
