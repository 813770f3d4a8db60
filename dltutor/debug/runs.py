"""In the kernel: run lab 08 with one fault on real gloo ranks and keep what a student would see.

    out = run_fault("skip", pg_timeout=5, flight=True, stacks=True)
    out.failure          # the course launcher's message (the blamed rank named), or None
    out.caught           # {rank: (seconds after the fault, the error it raised)}
    out.fr_text          # torch's Flight Recorder analyzer over the dumps (flight=True)
    out.stacks           # {rank: py-spy dump taken while the ranks hung} (stacks=True)
    out.left_running     # processes of the launch still alive afterwards (always [] here)

Every run is bounded: the ranks' process-group timeout (`pg_timeout`, seconds) ends a hang; the
launcher's own `timeout` ends anything else and kills every process of the launch.
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from dltutor.core import course
from dltutor.core import env as _env
from dltutor.debug import flight, stacks

LAB = "08_debugging/faulty_train.py"
DETAIL_ENV = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}


@dataclass
class Outcome:
    fault: str
    metrics: list = field(default_factory=list)
    failure: str | None = None
    blamed: list = field(default_factory=list)
    log_dir: Path | None = None
    wall_s: float = 0.0
    ended_t: float = 0.0            # time.time() when the launcher returned or raised
    stacks: dict = field(default_factory=dict)
    stacks_t: float | None = None
    fr_text: str = ""
    fr_last: dict = field(default_factory=dict)
    left_running: list = field(default_factory=list)
    backend: str = "local"
    load: tuple | None = None       # os.getloadavg() when the launch ended: was the machine shared?

    def of(self, event: str) -> list[dict]:
        return sorted((m for m in self.metrics if m.get("event") == event),
                      key=lambda m: (m.get("step", 0), m.get("rank", 0)))

    @property
    def fault_t(self) -> float | None:
        ts = [m["t"] for m in self.of("fault")]
        return min(ts) if ts else None

    @property
    def fault_rank(self) -> int | None:
        ranks = [m["rank"] for m in self.of("fault")]
        return min(ranks) if ranks else None

    @property
    def caught(self) -> dict[int, tuple[float, str]]:
        t0 = self.fault_t or 0.0
        return {m["rank"]: (m["t"] - t0, m["error"]) for m in self.of("caught")}

    def steps(self) -> list[dict]:
        return self.of("step")

    def launcher_text(self) -> str:
        path = (self.log_dir or Path(".")) / "launcher.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log(self, rank: int) -> str:
        path = (self.log_dir or Path(".")) / f"rank{rank}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _left_running(metrics) -> list:
    from dltutor.launch.processes import tagged_processes
    tags = {m.get("tag") for m in metrics if m.get("event") == "start" and m.get("tag")}
    return [p.pid for tag in tags for p in tagged_processes(tag)]


def run_fault(fault: str = "none", *, nproc: int = 2, fault_rank: int = 1, fault_step: int = 3,
              pg_timeout: float = 5.0, detail: bool = False, flight_recorder: bool = False,
              stack_dump: bool = False, checks: bool = False, loss_scale: bool = False,
              slow_ms: float = 150.0, args=(), backend: str = "local", timeout: float = 120.0,
              echo: bool = False, env=None) -> Outcome:
    """Launch lab 08 with `fault` on rank `fault_rank` at `fault_step`; never raises for the
    fault itself (a failing or hanging run is the point)."""
    from dltutor.launch.results import LaunchError
    from dltutor.launch.run import launch
    log_dir = _env.runs_dir() / f"{time.strftime('%Y%m%d-%H%M%S')}-08-{fault}-{uuid.uuid4().hex[:6]}"
    log_dir.mkdir(parents=True, exist_ok=True)
    lab_args = ["--tiny", "--fault", fault, "--fault-rank", str(fault_rank), "--fault-step",
                str(fault_step), "--pg-timeout", str(pg_timeout), "--slow-ms", str(slow_ms),
                *(["--checks"] if checks else []), *(["--loss-scale"] if loss_scale else []),
                *(["--fr-dir", str(log_dir / "fr")] if flight_recorder else []), *map(str, args)]
    ranks_env = {"CUDA_VISIBLE_DEVICES": "", **(DETAIL_ENV if detail else {}),
                 **(flight.env() if flight_recorder else {}), **(env or {})}
    watch = stacks.StackWatch(log_dir, nproc, delay=min(1.5, pg_timeout / 3)) if stack_dump else None
    if watch:
        watch.start()
    out = Outcome(fault, log_dir=log_dir, backend=backend)
    started = time.monotonic()
    try:
        result = launch(course.lab(LAB), nproc=nproc, args=lab_args, backend=backend,
                        env=ranks_env, timeout=timeout, log_dir=log_dir, threads=1, echo=echo,
                        oversubscribe=True)
        out.metrics = result.metrics
    except LaunchError as exc:
        out.failure, out.blamed = str(exc), list(exc.ranks)
        out.metrics = exc.result.metrics if exc.result is not None else []
    out.ended_t, out.wall_s = time.time(), time.monotonic() - started
    out.load = os.getloadavg()
    if watch:
        watch.stop.set()
        watch.join(timeout=30)
        out.stacks, out.stacks_t = watch.dumps, watch.taken_at
    if flight_recorder and (log_dir / "fr").is_dir():
        out.fr_text = flight.analyze(log_dir / "fr")
        out.fr_last = flight.last_entries(log_dir / "fr")
    out.left_running = _left_running(out.metrics)
    return out


def launcher_lines(out: Outcome, keys=()) -> list[str]:
    """The launcher's own lines of the run (torchrun's, horovodrun's), those with any of `keys`."""
    path = (out.log_dir or Path(".")) / "launcher.log"
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return [ln for ln in lines if not keys or any(k in ln for k in keys)]


def size_args(samples: int, batch_size: int, epochs: int) -> tuple:
    """The lab's flags for its data and run size (they win over --tiny's preset)."""
    return ("--samples", samples, "--batch-size", batch_size, "--epochs", epochs)


def size_line(samples: int, batch_size: int, epochs: int, nproc: int) -> str:
    """The data and run size of every broken run, in words."""
    per_epoch = -(-samples // (nproc * batch_size))
    return (f"Every run: SYNTHETIC data drawn in the lab from a fixed seed (16 features, 4 classes), "
            f"{samples} samples, {batch_size} per rank per step, {epochs} epoch(s) on {nproc} "
            f"ranks: {per_epoch} steps per epoch, {per_epoch * epochs} steps.")
