"""Inside a rank forked by the warm start: become `python -u script.py args` with its own environment.

`dltutor.launch.warm_server` forks one child per rank and calls `become(...)` in it. The child
already has torch imported (that is the point); everything a fresh `python script.py` started by
torchrun would have on its own is set here before the script runs as `__main__`:

  * stdin from /dev/null, stdout and stderr to the rank's own pipes (C++ messages included),
  * the environment torchrun gives a rank (`rank_env`), in `os.environ` *and* in the process's
    environment block, so `ps e`, psutil and /proc/<pid>/environ show it like any rank's
    (that is how a launch finds its processes: dltutor.launch.processes.tagged_processes),
  * default signal handlers, the working directory, sys.argv, sys.path[0], fresh random seeds for
    `random` and numpy (torch's default generator is still untouched, as in a fresh process),
    torch's intra-op threads from OMP_NUM_THREADS,
  * death with its server (PR_SET_PDEATHSIG): a rank never outlives the process it was forked from.

The rank ends like an interpreter does: SystemExit's code, 1 and the traceback for an uncaught
exception (from the script's own frame on), non-daemon threads joined, the exit handlers, flushed
streams, then `os._exit`. Unlike a fresh interpreter, every rank has the server's hash seed.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import random
import runpy
import signal
import sys
import threading
import traceback

PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15
ROOM_ENV = "DLTUTOR_WARM_ROOM"   # the server's padding: room for a rank's environment block
WARM_ENV = "DLTUTOR_WARM_START"  # set in every rank started this way (dist.detect reads it)


def rank_env(base: dict, rank: int, nproc: int, port: int) -> dict:
    """The variables torchrun gives local rank `rank` of `nproc` (single node), on `base`."""
    env = {k: v for k, v in base.items() if k != ROOM_ENV}
    env.update(RANK=str(rank), LOCAL_RANK=str(rank), GROUP_RANK="0", ROLE_RANK=str(rank),
               ROLE_NAME="default", WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
               GROUP_WORLD_SIZE="1", ROLE_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), **{WARM_ENV: "1"})
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    return env


def _stat_field(n: int) -> int:
    """Field `n` (1-based, as in proc(5)) of /proc/self/stat."""
    with open("/proc/self/stat", "rb") as fh:
        rest = fh.read().rsplit(b")", 1)[1].split()
    return int(rest[n - 3])


def environ_block(env: dict, room: int, first=()) -> bytes:
    """`env` as NUL-separated KEY=VALUE entries that fit `room` bytes, NUL-padded; the keys in
    `first` are written first, so they survive if the rest has to be cut."""
    keys = [k for k in first if k in env] + [k for k in env if k not in first]
    out = b""
    for key in keys:
        entry = f"{key}={env[key]}".encode("utf-8", "surrogateescape") + b"\0"
        if len(out) + len(entry) >= room:
            break
        out += entry
    return out.ljust(room, b"\0")


def rewrite_environ_block(env: dict, first=()) -> bool:
    """Make /proc/self/environ show `env`: write it over this process's original environment
    block (the server was started with ROOM_ENV padding so it fits). libc's `environ` must no
    longer point into that block: call this after os.environ was cleared and refilled."""
    try:
        start, end = _stat_field(50), _stat_field(51)   # env_start, env_end (Linux >= 3.5)
    except (OSError, IndexError, ValueError):
        return False
    if not 0 < start < end:
        return False
    ctypes.memmove(start, environ_block(env, end - start, first), end - start)
    return True


def _die_with_server(server_pid: int, name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != server_pid:          # the server died before prctl: leave now
        os._exit(1)
    libc.prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_as_main(script: str) -> int:
    """Run `script` as `__main__`; its exit code as the interpreter would give it."""
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - an uncaught exception ends the rank with 1
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next       # drop runpy's frames: the traceback starts in the script
        if tb is not None:
            exc.with_traceback(tb)  # hooks that print exc.__traceback__ see the trimmed one too
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return 1


def _fresh_process_state(env: dict, req: dict) -> None:
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.environ.clear()                    # unsetenv each: libc's environ is all ours after this
    os.environ.update(env)
    rewrite_environ_block(env, first=req.get("first_keys", ()))
    os.chdir(req["cwd"])
    script = req["script"]
    sys.argv = [script, *req["args"]]
    sys.path[0] = os.path.dirname(script)
    random.seed()                         # a fresh interpreter seeds these from the OS
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        set_threads(int(threads))


def set_threads(n: int) -> None:
    """torch's intra-op threads and the BLAS numpy loaded (the server kept both at 1: a BLAS
    thread pool started before the fork would be a thread in the server)."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    with open("/proc/self/maps") as fh:
        libs = {line.split()[-1] for line in fh if "openblas" in line.rsplit("/", 1)[-1]}
    for lib in libs:
        handle = ctypes.CDLL(lib)
        for symbol in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                       "openblas_set_num_threads"):
            if hasattr(handle, symbol):
                getattr(handle, symbol)(ctypes.c_int(n))
                break


def become(req: dict, rank: int, out_fd: int, err_fd: int, close_fds, server_pid: int):
    """In the forked child: turn into rank `rank` of request `req`, run it, exit. Never returns."""
    code = 70
    try:
        _die_with_server(server_pid, f"rank{rank}")
        for fd in close_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in {null, out_fd, err_fd} - {0, 1, 2}:
            os.close(fd)
        env = rank_env(req["env"], rank, req["nproc"], req["port"])
        _fresh_process_state(env, req)
        code = run_as_main(req["script"])
        threading._shutdown()             # as at interpreter exit: wait for non-daemon threads,
        atexit._run_exitfuncs()           # then the exit handlers (dist's rank_exit may leave here)
    except BaseException:  # noqa: BLE001 - whatever happens, the child must not return
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(code & 0xFF if isinstance(code, int) else 1)
