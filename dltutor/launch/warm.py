"""The warm start: local ranks forked from a process that has torch imported, not started cold.

`launch(script, nproc)` (backend 'local', the default) runs here; `backend='torchrun'` runs the same
ranks under torchrun, and DLTUTOR_LAUNCHER=torchrun makes that the default. Both give each rank
the same variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...);
the ranks meet at the same env:// rendezvous and compute the same thing.

Where the time goes: torchrun imports torch (about 2 s on 2 cores), then every rank imports it
again, then the rendezvous. The warm start pays the import once per kernel, in the *warm server*
(`dltutor.launch.warm_server`): a process of its own, started on the first local launch, that
imports torch and dltutor, starts no thread, never touches CUDA and waits. Each launch starts a
tiny stdlib-only client (`warm_client.py`, milliseconds) as its launcher; the client asks the
server to fork the ranks and relays their output. Ranks are never forked from the kernel itself:
they inherit none of the student's variables or the kernel's threads.

Nothing outlives the kernel: the server exits when its stdin (a pipe from the kernel) closes, a
rank dies with its server (PR_SET_PDEATHSIG), and every rank carries the launch's tag in its
environment block (see warm_rank), so the launch's watchdog and reaper find it like a torchrun rank.

Room on a shared node: the server (about 370 MiB of its own, bench/bench_class_footprint.py) also
goes by itself after DLTUTOR_WARM_IDLE minutes (default 10; a fraction is fine; 0 or 'never': it
stays) with no launch running. Each launch first tells the server it is coming ("keep"); one that
is gone or going is started again, and the launch that starts one says so in a line (`start_note`).
"""
from __future__ import annotations

import atexit
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dltutor.core.dist import RANK_ENV
from dltutor.launch.backends import TorchrunBackend
from dltutor.launch.warm_rank import ROOM_ENV

CLIENT = Path(__file__).with_name("warm_client.py")
OWNER_ENV = "DLTUTOR_WARM_OWNER"   # the server's: pid of the process that started it
LAUNCHER_ENV = "DLTUTOR_LAUNCHER"  # 'torchrun': backend 'local' means torchrun, not the warm start
IDLE_ENV = "DLTUTOR_WARM_IDLE"     # minutes without a launch after which the server goes
IDLE_DEFAULT = 10.0                # minutes
START_TIMEOUT = 120.0              # s for the server to import torch and say "ready"
KEEP_TIMEOUT = 10.0                # s for a running server to answer "keep"
_server: dict = {}


class WarmStartError(RuntimeError):
    """The warm server could not start (its message says why and what to use instead)."""


def room_for(env: dict) -> int:
    """Bytes kept in the server's environment block for a rank's (its env plus rank variables)."""
    size = sum(len(k) + len(v) + 2 for k, v in env.items())
    return max(64 * 1024, 2 * size + 16 * 1024)


def server_env(base: dict) -> dict:
    env = {k: v for k, v in base.items() if k not in RANK_ENV and k != "DLTUTOR_LAUNCH_ID"}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **{OWNER_ENV: str(os.getpid())})
    env[ROOM_ENV] = " " * room_for(base)
    return env


def idle_minutes(env=None) -> float | None:
    """DLTUTOR_WARM_IDLE in minutes (default 10); None: the server stays as long as the kernel."""
    raw = (os.environ if env is None else env).get(IDLE_ENV, "")
    text = raw.strip().lower()
    if not text:
        return IDLE_DEFAULT
    if text in ("never", "0"):
        return None
    try:
        minutes = float(text)
    except ValueError:
        minutes = float("nan")
    if not 0 <= minutes < float("inf"):
        raise ValueError(f"{IDLE_ENV}={raw!r}: give the minutes without a launch after which the "
                         "warm start's server stops (e.g. 10 or 0.5), or 'never'")
    return minutes or None


def _minutes(m: float) -> str:
    return f"{m:g} idle minute" + ("" if m == 1 else "s")


def start_note(minutes: float | None, ended: str | None) -> str:
    """The line the launch that starts a server prints: what it is, and when it goes."""
    goes = (f"it stops after {_minutes(minutes)} ({IDLE_ENV})" if minutes
            else f"it stays until the kernel ends ({IDLE_ENV}=never)")
    if ended is None:
        return f"warm start: torch imported once in a server of this kernel; {goes}"
    return f"warm start: torch imported again (the server had {ended}); {goes}"


def _reply(timeout: float) -> str:
    """The server's next line on its stdout ('' at its end or after `timeout` s)."""
    out = _server["proc"].stdout
    ready, _, _ = select.select([out], [], [], timeout)
    return out.readline().decode(errors="replace").strip() if ready else ""


def keep_for_a_launch(minutes: float | None) -> bool:
    """Tell the running server a launch is coming (its idle clock starts again); False if it
    is gone or going (it had stopped for being idle, or died)."""
    proc = _server["proc"]
    try:
        proc.stdin.write(f"keep {minutes * 60 if minutes else 0}\n".encode())
        proc.stdin.flush()
    except OSError:          # gone: its stdout still says why
        pass
    _server["said"] = _reply(KEEP_TIMEOUT)
    if _server["said"] == "ok":
        _server["minutes"] = minutes   # its setting from now on
    return _server["said"] == "ok"


def how_it_ended() -> str:
    """Why this kernel's server is no longer there (for the note of the next start)."""
    proc, said = _server["proc"], _server.get("said")
    if said in (None, "ok") and proc.poll() is not None:
        said = _reply(1.0)       # an idle exit said "idle" before it ended
    if said == "idle":
        minutes = _server.get("minutes")
        return f"stopped after {_minutes(minutes)}" if minutes else "stopped when idle"
    try:
        return f"ended with exit code {proc.wait(timeout=2)}"
    except subprocess.TimeoutExpired:
        return "stopped answering"


def running() -> bool:
    proc = _server.get("proc")
    return (proc is not None and proc.poll() is None and _server.get("owner") == os.getpid()
            and os.path.exists(_server["path"]))


def start(python: str = sys.executable) -> str:
    """Start this process's warm server (once; again if it stopped or died); its socket's path.
    A launch calls it just before connecting: a running server is told a launch is coming."""
    minutes = idle_minutes()
    if running() and keep_for_a_launch(minutes):
        return _server["path"]
    ended = how_it_ended() if "proc" in _server and _server.get("owner") == os.getpid() else None
    stop()
    folder = tempfile.mkdtemp(prefix="dltutor-warm-")
    path = os.path.join(folder, "server.sock")
    idle = ["--idle", str(minutes * 60)] if minutes else []
    proc = subprocess.Popen([python, "-u", "-m", "dltutor.launch.warm_server", *idle, path],
                            env=server_env(os.environ), stdin=subprocess.PIPE, bufsize=0,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)   # unbuffered: select sees every line
    _server.update(proc=proc, path=path, folder=folder, owner=os.getpid(), minutes=minutes)
    lines, deadline = [], time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
        if line == "ready":          # from now on its stdout only answers "keep" (or "idle")
            _server["note"] = start_note(minutes, ended)
            return path
        if line:
            lines.append(line)
        if ready and not line and proc.poll() is not None:
            break
    stop()
    raise WarmStartError("the warm start server did not start: " + " | ".join(lines[-5:] or
                         ["no output"]) + ". Use launch(..., backend='torchrun') meanwhile")


def stop() -> None:
    """End this process's warm server (its ranks die with it); the next local launch restarts it."""
    if _server.get("owner") != os.getpid():   # a fork of the kernel: not its server to end
        return
    proc = _server.pop("proc", None)
    if proc is not None:
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    folder = _server.pop("folder", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    _server.clear()


def server_pid() -> int | None:
    return _server["proc"].pid if running() else None


atexit.register(stop)


class WarmBackend(TorchrunBackend):
    """Forks of the warm server as ranks. Lines, the nproc limit and the stop codes are
    torchrun's (the client labels lines `[rank<N>]:` and SIGTERMs the other ranks after a
    failure, as torchrun does); only its own summary lines differ."""
    name = "warm"
    _exited = re.compile(r"^rank (\d+) exited with code (-?\d+)( \(stopped by the launcher\))?$",
                         re.M)
    _failed = re.compile(r"^rank \d+ failed \(exitcode")

    def check(self, nproc):
        super().check(nproc)
        idle_minutes()           # a bad DLTUTOR_WARM_IDLE: said before anything starts

    def command(self, script, nproc, args, *, port, log_dir, python=sys.executable):
        path = start(python)
        note = _server.pop("note", None)   # only the launch that started the server says it
        say = ["--say", note] if note else []
        return [python, "-I", "-S", str(CLIENT), *say, path, str(nproc), str(port), script,
                *args], {}

    def failures(self, launcher_text):
        """{rank: code}; a rank the client stopped after another failed counts as SIGTERMed
        (-15, a stop code) whichever signal ended it, so the rank that failed first is blamed."""
        return {int(r): -15 if stopped else int(c)
                for r, c, stopped in self._exited.findall(launcher_text) if c != "0"}

    def port_clash(self, launcher_text):
        return "address already in use" in launcher_text

    def failure_seen(self, line):
        return bool(self._failed.match(line))


def local_backend_name() -> str:
    """What backend 'local' means here: 'warm' (default) or 'torchrun' (DLTUTOR_LAUNCHER)."""
    chosen = os.environ.get(LAUNCHER_ENV, "warm").strip().lower() or "warm"
    if chosen not in ("warm", "torchrun"):
        raise ValueError(f"{LAUNCHER_ENV}={chosen!r}: use 'warm' (the default) or 'torchrun'")
    return chosen
