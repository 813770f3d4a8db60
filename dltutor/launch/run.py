"""Inside the kernel: run a lab on N processes, stream its output live, always clean up.

    result = launch("course/labs/03_ddp/train.py", nproc=2, args=["--tiny"])
    result.metrics        # the ranks' `dist.report(...)` lines, sorted by rank
A lab's launch first says which course copy the lab comes from (`course.lab_origin`). The kernel
never joins the process group: it starts a launcher (the warm start's client, dltutor.launch.warm;
torchrun, python, horovodrun: dltutor.launch.backends; srun/sbatch) in its own session, reads its
output line by line, writes each rank's lines to `<log_dir>/rank<N>.log` and into the cell as
`[rank N] ...`, and watches:
  * a rank fails  -> LaunchError naming it, with the last lines of its log; if the launcher does
    not stop the other ranks within FAILURE_GRACE seconds, they are killed here;
  * the timeout   -> everything is killed, LaunchTimeout names the ranks still running;
  * an interrupt  -> (the stop button) everything is killed and KeyboardInterrupt goes on;
  * a busy port   -> the launcher could not open the rendezvous port: one retry on a new port;
  * ranks that reported and were then aborted while exiting -> a WARNING line, results kept;
  * silence       -> no rank printed for a while: which ranks still run, what each printed last,
    when the launch gives up (dltutor.launch.waiting), repeated at growing intervals.
Every process is tagged with DLTUTOR_LAUNCH_ID: none can outlive the launch, even an orphan.
"""
from __future__ import annotations

import collections
import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from dltutor.core import env as _env
from dltutor.core.course import lab_origin
from dltutor.core.device import default_nproc
from dltutor.core.dist import free_port, read_report
from dltutor.launch import reaper, restart
from dltutor.launch.backends import Backend, HorovodBackend, PythonBackend, TorchrunBackend
from dltutor.launch.processes import (TAG_ENV, check_capacity, checked_request, clean_env,
                                      course_of_ranks, rank_of, tagged_processes)
from dltutor.launch.results import (LaunchError, LaunchResult, LaunchTimeout,
                                    aborted_after_reporting, blame_ranks, failed_codes,
                                    failure_message, watchdog_codes)
from dltutor.launch.slurm import SlurmBackend
from dltutor.launch.waiting import Waiting
from dltutor.launch.warm import WarmBackend, local_backend_name

FAILURE_GRACE = 5.0   # s between "a rank failed" and killing whatever is left
TERM_GRACE = 3.0      # s between SIGTERM and SIGKILL
TAIL_LINES = 20

# 'local': the warm start, or torchrun where DLTUTOR_LAUNCHER=torchrun (dltutor.launch.warm);
# 'slurm': srun inside an allocation, sbatch outside (site from $DLTUTOR_SITE, default 'local').
BACKENDS: dict[str, Backend] = {"warm": WarmBackend(), "torchrun": TorchrunBackend(), "python":
                                PythonBackend(), "horovod": HorovodBackend(), "slurm": SlurmBackend()}


def get_backend(name) -> Backend:
    """A registered back end by name, or a Backend instance as given (e.g. SlurmBackend(site=...))."""
    if isinstance(name, Backend):
        return name
    if name not in BACKENDS and name != "local":
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted([*BACKENDS, 'local'])}")
    return BACKENDS[local_backend_name() if name == "local" else name]


class _Run:
    """One start of a launcher: stream, watch, clean up."""

    def __init__(self, backend: Backend, cmd, env, log_dir: Path, nproc: int, echo: bool,
                 waiting: Waiting):
        self.backend, self.cmd, self.env, self.echo, self.waiting = backend, cmd, env, echo, waiting
        self.tag, self.log_dir = env[TAG_ENV], log_dir
        self.files = {r: open(log_dir / f"rank{r}.log", "a", encoding="utf-8") for r in range(nproc)}
        self.launcher_log = open(log_dir / "launcher.log", "a", encoding="utf-8")
        self.tails = collections.defaultdict(lambda: collections.deque(maxlen=TAIL_LINES))
        self.launcher_lines, self.metrics = [], []
        self.failure_at, self.watchdog, self.proc, self.reaper = None, False, None, None
        self.first_error = {}     # rank -> when its first traceback began (monotonic seconds)

    def _handle(self, line: str) -> None:
        rank, text = self.backend.split(line.rstrip("\r\n"))
        if text is None:  # the back end holds a piece of a longer line (srun --label cuts them)
            return
        if rank is None:
            self.launcher_lines.append(text)
            self.waiting.heard_launcher(text)
            self.launcher_log.write(text + "\n")
            self.launcher_log.flush()
            if self.backend.failure_seen(text) and self.failure_at is None:
                self.failure_at = time.monotonic()
            elif (self.echo or self.echo is None and text.startswith("warm start:")) \
                    and self.failure_at is None:   # echo None: a quiet lab launch, its notes shown
                print(f"[{self.backend.name}] {text}", file=sys.stdout, flush=True)
            return
        self.tails[rank].append(text)
        self.waiting.heard(rank, text, time.monotonic())
        if text.startswith("Traceback") and rank not in self.first_error:
            self.first_error[rank] = time.monotonic()
        out = self.files.get(rank)
        if out is None:  # a rank beyond nproc (a launcher that starts more): log it anyway
            out = self.files[rank] = open(self.log_dir / f"rank{rank}.log", "a", encoding="utf-8")
        out.write(text + "\n")
        out.flush()
        record = read_report(text)
        if record is not None:  # machine-readable: into result.metrics only
            self.metrics.append({"rank": rank, **record})
            return
        if self.echo:
            print(f"[rank {rank}] {text}", file=sys.stdout, flush=True)

    def _reader(self, pipe, q) -> None:
        try:
            for raw in iter(pipe.readline, b""):
                q.put(raw.decode("utf-8", "replace"))
        finally:
            q.put(None)

    # -- processes -------------------------------------------------------------------------
    def processes(self) -> list:
        procs = {p.pid: p for p in tagged_processes(self.tag)}
        if self.proc is not None and self.proc.poll() is None:
            try:
                root = psutil.Process(self.proc.pid)
                procs.setdefault(root.pid, root)
                for child in root.children(recursive=True):
                    procs.setdefault(child.pid, child)
            except psutil.Error:
                pass
        return list(procs.values())

    def running_ranks(self) -> list[int]:
        ranks = {rank_of(p) for p in self.processes()}
        if not ranks - {None} and self.backend.name == "python" and self.proc.poll() is None:
            return [0]
        return sorted(ranks - {None})

    def kill(self) -> None:
        """SIGTERM the launcher's group and every tagged process, SIGKILL what is left."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            # the launcher is our child: only Popen may reap it, or its exit code is lost
            others = [p for p in self.processes() if self.proc is None or p.pid != self.proc.pid]
            alive = self.proc is not None and self.proc.poll() is None
            if not others and not alive:
                return
            if alive:
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, sig)
            for p in others:
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
            psutil.wait_procs(others, timeout=TERM_GRACE)
            if alive:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=TERM_GRACE)

    def _kill_uninterrupted(self) -> None:
        while True:  # a second press of the stop button must not leave orphans behind
            with contextlib.suppress(KeyboardInterrupt):
                return self.kill()

    # -- the loop --------------------------------------------------------------------------
    def run(self, deadline: float) -> int:
        try:
            try:
                self.proc = subprocess.Popen(self.cmd, env=self.env, stdin=subprocess.DEVNULL,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             start_new_session=True)
            except FileNotFoundError as exc:
                raise LaunchError(f"launch: cannot start {self.cmd[0]!r} "
                                  f"(backend {self.backend.name!r}): {exc}") from None
            self.reaper = reaper.start(self.tag, self.env)
            q = queue.Queue()
            readers = [threading.Thread(target=self._reader, args=(pipe, q), daemon=True)
                       for pipe in (self.proc.stdout, self.proc.stderr)]
            [t.start() for t in readers]
            open_streams, exited_at = len(readers), None
            while open_streams:
                try:
                    line = q.get(timeout=0.1)
                    if line is None:
                        open_streams -= 1
                    else:
                        self._handle(line)
                        continue
                except queue.Empty:
                    pass
                now = time.monotonic()
                if self.proc.poll() is not None:
                    exited_at = exited_at or now
                    if now - exited_at > 2.0:  # orphans still hold the pipes: stop them
                        self.kill()
                        exited_at = now
                elif now > deadline:
                    ranks = self.running_ranks()
                    self._kill_uninterrupted()
                    raise LaunchTimeout(
                        f"launch timed out; rank(s) still running: {ranks or 'none'} "
                        f"(all processes were killed)", ranks=ranks)
                elif self.failure_at is not None and now - self.failure_at > FAILURE_GRACE:
                    self.watchdog = True  # the launcher did not stop the other ranks: we do
                    self.kill()
                elif self.waiting.due(now):  # silence: say what the cell is waiting for
                    print(self.waiting.notice(now, self.running_ranks()), flush=True)
            self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            return self.proc.returncode
        except KeyboardInterrupt:
            self._kill_uninterrupted()
            raise
        finally:
            self._kill_uninterrupted()  # nothing tagged survives, whatever happened
            if self.reaper is not None:
                self.reaper.kill()
                self.reaper.wait()
            for f in (*self.files.values(), self.launcher_log):
                f.close()

    def blame(self) -> tuple[list[int], list[int]]:
        """(ranks to blame, every failed rank): not those the launcher stopped (SIGTERM/SIGKILL)
        nor those that only lost a peer in a collective, unless nothing else is left."""
        codes = failed_codes(self.backend, "\n".join(self.launcher_lines), self.tails)
        first = lambda r: (self.first_error.get(r, float("inf")), r)  # noqa: E731
        return (blame_ranks(codes, lambda r: "\n".join(self.tails[r]), self.backend.stop_codes,
                            self.first_error), sorted(codes, key=first))


def launch(script, nproc: int | None = None, args=(), backend: str = "local", env=None,
           timeout: float = 1800.0, log_dir=None, threads: int | None = None, echo: bool = True,
           oversubscribe: bool = False, nodes: int | None = None, max_restarts: int = 0) -> LaunchResult:
    """Run `script` on `nproc` ranks with `backend` and return a `LaunchResult`.

    backend: 'local' (ranks forked from the warm start, dltutor.launch.warm), 'torchrun' (the same
    ranks under torchrun), 'python' (one process, nproc=1), 'horovod' (horovodrun, --gloo on CPU),
    'slurm' (srun inside an allocation, else sbatch with the site profile $DLTUTOR_SITE) or a
    Backend instance such as `SlurmBackend(site=..., nodes=2)`; `nodes=2`: 2 nodes x nproc/2 ranks
    (backend='slurm' only; a job of its own if this kernel's job has fewer). `env` adds variables for the
    ranks; OMP_NUM_THREADS is `threads` or `dltutor.core.env.threads_per_rank(nproc)` unless `env`
    sets it. Logs go to `log_dir` (default `<dltutor.core.env.runs_dir()>/<time>-<script>-<id>`).
    `echo=False` keeps the cell quiet. More ranks than GPUs (or, without GPUs, cores) are refused
    unless `oversubscribe`. Raises LaunchError (a rank failed), LaunchTimeout, or
    KeyboardInterrupt (after killing every process of the launch). `nproc=None`: the node's GPUs
    on a GPU node, else 2 (`dltutor.core.device.default_nproc`). `max_restarts=N`: a rank dies ->
    all stop and all start again, N times at most (a RestartedResult, dltutor.launch.restart).
    """
    if max_restarts:   # the loop lives in dltutor.launch.restart; each attempt comes back here
        return restart.restarting(launch, dict(locals()), get_backend)
    nproc = default_nproc() if nproc is None else nproc
    script, args = checked_request(script, nproc, args, timeout, threads, env)
    if origin := lab_origin(script):   # which copy: the student's own, or the installed course
        print(f"[launch] {origin}", flush=True)
    be = get_backend(backend) if nodes is None else get_backend(backend).on_nodes(nodes)
    be.check(nproc)
    if be.local:
        check_capacity(nproc, oversubscribe, env)
    tag = uuid.uuid4().hex[:12]
    log_dir = Path(log_dir) if log_dir else _env.runs_dir() / (
        time.strftime("%Y%m%d-%H%M%S-") + Path(script).stem + "-" + tag[:6])
    _env.made(log_dir)                  # one clear error when the user's folder is not writable
    n_threads = str(threads or _env.threads_per_rank(nproc))
    child_env = clean_env(os.environ, be)
    child_env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS=n_threads, MKL_NUM_THREADS=n_threads,
                     DLTUTOR_RANK_PREFIXED="1", **course_of_ranks(), **{TAG_ENV: tag})
    child_env.update({str(k): str(v) for k, v in (env or {}).items()})
    deadline = (started := time.monotonic()) + timeout
    for attempt in (1, 2):
        port = free_port() if be.needs_port else None
        cmd, extra = be.command(script, nproc, args, port=port, log_dir=log_dir)
        run = _Run(be, cmd, {**child_env, **extra}, log_dir, nproc, echo or (None if origin else False),
                   Waiting(deadline, timeout, child_env, nproc))
        try:
            rc = run.run(deadline)
        except LaunchError as exc:  # the timeout: say where the logs are
            exc.result = LaunchResult(-1, time.monotonic() - started, run.metrics,
                                      _logs(log_dir, nproc), cmd, log_dir, be.name)
            raise
        if rc != 0 and attempt == 1 and not run.tails and be.port_clash("\n".join(run.launcher_lines)):
            if echo:
                print(f"[{be.name}] port {port} was taken; retrying on another port", flush=True)
            continue
        break
    result = LaunchResult(rc, time.monotonic() - started,
                          sorted(run.metrics, key=lambda m: m.get("rank", 0)),
                          _logs(log_dir, nproc), cmd, log_dir, be.name)
    codes = be.failures("\n".join(run.launcher_lines))
    if run.watchdog:   # the ranks dltutor stopped count as stopped by the launcher (it was slow)
        codes = {**watchdog_codes(nproc, be.stop_codes[0], run.tails), **codes}
    warning = aborted_after_reporting(codes, run.tails, run.metrics, be, log_dir)  # results kept
    if warning:
        print(warning, flush=True)
    elif rc != 0 or run.watchdog:
        raise LaunchError(failure_message(run, rc, log_dir, FAILURE_GRACE), ranks=run.blame()[0],
                          result=result)
    return result


def _logs(log_dir: Path, nproc: int) -> dict:
    return {r: log_dir / f"rank{r}.log" for r in range(nproc)}
