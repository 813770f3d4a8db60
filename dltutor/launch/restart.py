"""Restarts: when a rank dies, stop every rank and start the whole launch again, N times at most.

    result = launch(script, nproc=2, args=[...], max_restarts=3)    # dltutor.launch.run
    result.restarts      # one Restart per restart: which attempt failed, the rank blamed and why
    result.attempt_logs  # {attempt: {rank: log path}}: every attempt's logs, none overwritten

What torchrun's `--max-restarts N` does for its workers, done by the course's launcher for any
local back end: the warm start ('local') and torchrun. A failed attempt is stopped exactly as a
launch without restarts is (dltutor.launch.run: the blamed rank, the others stopped, nothing left
running); then the same command starts again on a new port, a new rendezvous with nothing left
over from the failed one (which is why torchrun's own restarts need
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, dltutor.checkpoint.restarts, and these do not). Each rank
sees the attempt in RESTART_COUNT_ENV (0 on the first), as torchrun's workers see
TORCHELASTIC_RESTART_COUNT; dltutor.checkpoint.restarts.restart_count reads both. ATTEMPT_T0_ENV
says when the attempt was started (a rank's start-up: dltutor.checkpoint.restarts.startup_s). The program
resumes from its own checkpoints: the launcher only starts it again.

Attempt k writes its logs to `<log_dir>/attempt-<k>/`. All attempts share one `timeout`;
a timeout or an interrupt (the stop button) ends the launch at once, with no restart. When every
attempt failed, LaunchError says so with each attempt's blamed rank and cause.
"""
from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from dltutor.core import env as _env
from dltutor.launch.results import LaunchError, LaunchResult, LaunchTimeout

RESTART_COUNT_ENV = "DLTUTOR_RESTART_COUNT"   # the attempt, 0 = the first start
ATTEMPT_T0_ENV = "DLTUTOR_ATTEMPT_T0"         # when the launcher started this attempt (epoch s)


@dataclass
class Restart:
    """One restart: attempt `attempt` failed and the launch started again."""
    attempt: int            # the attempt that failed (0 = the first start)
    ranks: list             # the ranks blamed (first = most likely cause; dltutor.launch.results)
    cause: str              # the first lines of the failure message: who failed and why
    exit_codes: dict        # {rank: exit code} the launcher reported (-9: SIGKILL)
    log_dir: Path           # that attempt's logs
    failed_at_s: float      # s from the launch's start to the failed attempt's end
    restarted_at_s: float   # s from the launch's start to the next attempt's start


@dataclass
class RestartedResult(LaunchResult):
    """The last attempt's LaunchResult (its metrics, logs, return code) over the whole launch's
    wall time, plus `restarts` (one Restart each) and `attempt_logs` ({attempt: {rank: path}})."""
    restarts: list = field(default_factory=list)
    attempt_logs: dict = field(default_factory=dict)

    @property
    def restart_count(self) -> int:
        return len(self.restarts)


def cause_of(exc: LaunchError, lines: int = 4) -> str:
    """The head of a failure message: the blamed rank and its error line, not its log tail."""
    head = str(exc).split("\n--- last", 1)[0]
    return "\n".join(head.splitlines()[:lines])


def exit_codes(exc: LaunchError, log_dir: Path, get_backend) -> dict:
    """{rank: exit code} of the failed ranks, as the attempt's launcher wrote them in its log
    (read by its back end, `get_backend(name)`)."""
    log = log_dir / "launcher.log"
    if exc.result is None or get_backend is None or not log.is_file():
        return {}
    return dict(sorted(get_backend(exc.result.backend).failures(log.read_text()).items()))


def signal_name(code) -> str:
    """'SIGKILL' for -9, 'exit code 1' for 1: how a rank ended."""
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return f"exit code {code}"


def restarting(launch_once, kwargs: dict, get_backend=None) -> RestartedResult:
    """Call `launch_once(**kwargs, max_restarts=0)` (dltutor.launch.run.launch) until an attempt
    succeeds or kwargs['max_restarts'] restarts are spent. Each attempt gets its own log folder,
    RESTART_COUNT_ENV and what is left of the timeout; LaunchTimeout and KeyboardInterrupt end it.
    `get_backend` (dltutor.launch.run's) reads each failed attempt's exit codes from its log."""
    kwargs = dict(kwargs)
    most = int(kwargs.pop("max_restarts"))
    if most < 0:
        raise ValueError(f"max_restarts={most}: give 0 or more")
    if getattr(kwargs.get("backend"), "name", kwargs.get("backend")) == "slurm":
        raise ValueError("max_restarts is for the launchers on this node ('local', 'torchrun'); "
                         "a Slurm job is restarted by the batch system: sbatch --requeue")
    script = kwargs["script"]
    timeout = float(kwargs["timeout"])
    root = Path(kwargs["log_dir"]) if kwargs.get("log_dir") else _env.runs_dir() / (
        time.strftime("%Y%m%d-%H%M%S-") + Path(script).stem + "-restarts")
    started, done, logs = time.monotonic(), [], {}
    for attempt in range(most + 1):
        left = timeout - (time.monotonic() - started)
        if left <= 0:
            raise LaunchTimeout(f"launch timed out after {timeout:.0f} s and {attempt} "
                                f"restart(s); no attempt left running", ranks=[])
        log_dir = root / f"attempt-{attempt}"
        env = {**(kwargs.get("env") or {}), RESTART_COUNT_ENV: str(attempt),
               ATTEMPT_T0_ENV: repr(time.time())}
        try:
            result = launch_once(**{**kwargs, "env": env, "log_dir": log_dir, "timeout": left},
                                 max_restarts=0)
        except LaunchTimeout:
            raise
        except LaunchError as exc:
            logs[attempt] = _logs_of(exc.result, log_dir)
            done.append(Restart(attempt, list(exc.ranks), cause_of(exc),
                                exit_codes(exc, log_dir, get_backend), log_dir,
                                time.monotonic() - started, float("nan")))
            if attempt == most:
                raise _exhausted(done, most, root, exc) from exc
            if kwargs.get("echo", True):
                print(f"[launch] attempt {attempt} failed (rank {_names(exc.ranks)}); restart "
                      f"{attempt + 1} of {most}", flush=True)
            done[-1].restarted_at_s = time.monotonic() - started
            continue
        logs[attempt] = dict(result.logs)
        return RestartedResult(result.returncode, time.monotonic() - started, result.metrics,
                               result.logs, result.command, root, result.backend,
                               restarts=done, attempt_logs=logs)
    raise AssertionError("unreachable")   # the loop returns or raises


def _names(ranks) -> str:
    return ", ".join(map(str, ranks)) or "none named"


def _logs_of(result, log_dir: Path) -> dict:
    return dict(result.logs) if result is not None else {
        int(p.stem[4:]): p for p in sorted(log_dir.glob("rank*.log")) if p.stem[4:].isdigit()}


def _exhausted(done: list, most: int, root: Path, last: LaunchError) -> LaunchError:
    """Every attempt failed: one error that lists them, blaming the last attempt's ranks."""
    lines = [f"launch failed on all {most + 1} attempts (max_restarts={most}); logs in {root}:"]
    for r in done:
        ends = lambda ranks: ", ".join(f"rank {k} ({signal_name(r.exit_codes[k])})"  # noqa: E731
                                       for k in ranks if k in r.exit_codes)
        others = ends(k for k in r.exit_codes if k not in r.ranks)
        why = [x for x in r.cause.splitlines()[1:] if x.startswith("rank ") and "stopped too" not in x]
        lines.append(f"  attempt {r.attempt}: {ends(r.ranks) or 'rank ' + _names(r.ranks)} blamed"
                     + (f", then {others}" if others else "") + (f"; {why[0]}" if why else ""))
    err = LaunchError("\n".join(lines), ranks=last.ranks, result=last.result)
    err.restarts = done
    return err
