"""The warm start's server: torch imported once, each rank of a local launch forked from it.

    python -u -m dltutor.launch.warm_server [--idle SECONDS] SOCKET   (one per kernel, by warm.start)

Why a server of our own and not multiprocessing's forkserver: that one runs a pickled function and
gives its children the forkserver's own stdout, with no exit codes or pids for anyone but it. A
rank needs its own stdout and stderr pipes (C++ messages included, so the cell can label every
line), the launch must know each rank's pid and exit code, stop it with a signal, and lose it when
the launch's client goes away. The idea is the same: preload, then fork per rank, fds passed over
an AF_UNIX socket with SCM_RIGHTS.

It is single-threaded and never touches CUDA (checked after the preload: a fork after either
would hand the rank a broken process); each rank picks its device itself, after the fork.

Protocol: AF_UNIX SOCK_SEQPACKET, one JSON object per packet.
  client -> server  {"script", "args", "cwd", "nproc", "port", "env", "first_keys"} with 2*nproc
                    fds (each rank's stdout and stderr): fork the ranks
                    {"signal": N}: send signal N to the launch's ranks still running
  server -> client  {"started": rank, "pid": pid} per rank, {"exited": rank, "code": c} per rank
                    (c < 0: killed by signal -c), {"error": text} for a request it cannot run
  client hangs up   the launch's ranks still running are SIGKILLed
  stdin closes      (the kernel is gone) every rank is SIGKILLed and the server exits
  kernel -> server  "keep [S]" on stdin: a launch is coming (idle setting S s); "ok" on stdout
  idle exit         (--idle S) S s with no launch connected, no rank running and no "keep" (a
                    launch has CONNECT_GRACE s to connect): "idle" on stdout, folder removed, exit 0
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import time
import weakref

from dltutor.launch.warm_rank import become

# What labs import before their first line of work: paid once here instead of once per rank.
PRELOAD = ("numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch.utils.data",
           "torch.distributed.fsdp", "torch.distributed.tensor", "torchvision",
           "dltutor.core.dist", "dltutor.core.flags", "dltutor.core.device", "dltutor.core.env",
           "dltutor.core.train_step", "dltutor.data.loaders", "dltutor.single.models")
MAX_REQUEST = 1 << 20
CONNECT_GRACE = 30.0   # s an announced launch has to connect before idle time counts


def threads_now() -> int:
    return len(os.listdir("/proc/self/task"))


def preload(names=PRELOAD) -> None:
    """Import `names`; refuse (RuntimeError) if that started a thread or initialised CUDA.
    BLAS and OpenMP pools are kept at one thread here (a pool is threads); each rank sets its own
    from OMP_NUM_THREADS after the fork (warm_rank.set_threads)."""
    os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for name in names:
        importlib.import_module(name)
        if threads_now() != 1:
            raise RuntimeError(f"warm start: importing {name} started a thread ({threads_now()} "
                               "now); a fork would copy locks held by it. Use backend='torchrun'")
    quiet_exit_finalizers()
    gc.freeze()   # the preloaded objects leave the collector's sight: a rank's collections do
    #               not touch (and so copy) the pages it shares with the server
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("warm start: CUDA was initialised while preloading; ranks forked "
                           "from here could not use the GPU. Use backend='torchrun'")


def quiet_exit_finalizers() -> None:
    """The preload's weakref finalizers marked to run at exit (torch.library's thousands of
    operator registrations, undone one by one: ~50 ms per rank on 2 cores) no longer run at a
    rank's exit, which ends the process anyway. A rank's own finalizers and every atexit handler
    (logging, multiprocessing, DataLoader) still run."""
    for ref in list(weakref.finalize._registry):
        ref.atexit = False


class Launch:
    """One client's ranks: {pid: rank} of those still running."""

    def __init__(self, conn):
        self.conn, self.running = conn, {}

    def send(self, **msg) -> None:
        if self.conn is not None:
            try:
                self.conn.send(json.dumps(msg).encode())
            except OSError:
                pass

    def signal(self, sig: int) -> None:
        for pid in self.running:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


class Server:
    def __init__(self, path: str, idle_after: float | None = None):
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(16)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.sel.register(0, selectors.EVENT_READ, "kernel")
        self.launches: list[Launch] = []
        self.idle_after, self.ack, self.from_kernel = idle_after, None, b""
        self.keep()

    def keep(self) -> None:
        """A launch is coming: the idle clock starts again, with time for it to connect."""
        self.quiet_since = time.monotonic()
        self.grace_until = self.quiet_since + CONNECT_GRACE

    def busy(self) -> bool:
        """A launch is connected or has ranks running (the ended ones are forgotten)."""
        self.launches = [la for la in self.launches if la.conn is not None or la.running]
        return bool(self.launches)

    def idle_left(self) -> float | None:
        """Seconds until the idle exit; None while busy or when there is none."""
        if self.idle_after is None or self.busy():
            return None
        return max(self.quiet_since + self.idle_after, self.grace_until) - time.monotonic()

    def on_kernel(self) -> bool:
        """Read the kernel's stdin: False when it is closed (the kernel is gone)."""
        data = os.read(0, 4096)
        *lines, self.from_kernel = (self.from_kernel + data).split(b"\n")
        for line in lines:
            words = line.split()
            if words[:1] == [b"keep"]:
                if len(words) > 1:
                    self.idle_after = float(words[1]) or None
                self.keep()
                self.tell_kernel("ok")
        return bool(data)

    def tell_kernel(self, text: str) -> None:
        try:
            os.write(self.ack, text.encode() + b"\n")
        except (OSError, TypeError):   # the kernel is gone, or no channel yet (ack is None)
            pass

    def own_fds(self) -> list[int]:
        """Every fd of the server's own (closed in a forked rank)."""
        fds = [self.listener.fileno(), self.sel.fileno()]
        fds += [key.fd for key in self.sel.get_map().values() if key.fd > 2]
        fds += [self.ack] if self.ack is not None else []
        return fds

    def start_ranks(self, launch: Launch, req: dict, fds: list[int]) -> None:
        nproc = int(req["nproc"])
        if len(fds) != 2 * nproc:
            launch.send(error=f"expected {2 * nproc} fds, got {len(fds)}")
            for fd in fds:
                os.close(fd)
            return
        me = os.getpid()
        try:
            for rank in range(nproc):
                pid = os.fork()
                if pid == 0:
                    others = [fd for fd in fds if fd not in fds[2 * rank:2 * rank + 2]]
                    become(req, rank, fds[2 * rank], fds[2 * rank + 1], self.own_fds() + others, me)
                pidfd = os.pidfd_open(pid)
                self.sel.register(pidfd, selectors.EVENT_READ, (launch, rank, pid))
                launch.running[pid] = rank
                launch.send(started=rank, pid=pid)
        except OSError as exc:   # out of processes or memory: no half-started launch
            launch.signal(signal.SIGKILL)
            launch.send(error=f"the warm start could not fork rank {rank}: {exc}")
        finally:
            for fd in fds:
                os.close(fd)

    def on_client(self, launch: Launch) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(launch.conn, MAX_REQUEST, 512)
        except OSError:
            data, fds = b"", []
        if not data:                       # the client is gone: so is its launch
            launch.signal(signal.SIGKILL)
            self.sel.unregister(launch.conn)
            launch.conn.close()
            launch.conn = None
            return
        try:
            msg = json.loads(data)
        except ValueError:
            msg = {"error": "not a JSON request"}
        if "error" in msg or not isinstance(msg, dict):
            launch.send(error="the warm start server got a request it cannot read")
        elif "signal" in msg:
            launch.signal(int(msg["signal"]))
        else:
            self.start_ranks(launch, msg, fds)

    def on_exit(self, key) -> None:
        launch, rank, pid = key.data
        self.sel.unregister(key.fd)
        os.close(key.fd)
        _, status = os.waitpid(pid, 0)
        launch.running.pop(pid, None)
        launch.send(exited=rank, code=os.waitstatus_to_exitcode(status))

    def serve(self) -> str:
        """Serve until the kernel is gone ('kernel') or the idle time is up ('idle')."""
        while True:
            left = self.idle_left()
            if left is not None and left <= 0:
                return "idle"
            events = self.sel.select(timeout=left)
            if events:
                self.quiet_since = time.monotonic()
            for key, _ in events:
                if key.data == "kernel":
                    if not self.on_kernel():
                        return "kernel"    # the kernel that started us is gone
                elif key.data == "accept":
                    conn, _ = self.listener.accept()
                    launch, self.grace_until = Launch(conn), 0.0   # it came: no more grace
                    self.launches.append(launch)
                    self.sel.register(conn, selectors.EVENT_READ, launch)
                elif isinstance(key.data, Launch):
                    self.on_client(key.data)
                else:
                    self.on_exit(key)

    def shutdown(self) -> None:
        for launch in self.launches:
            launch.signal(signal.SIGKILL)
            for pid in list(launch.running):
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def _stop(signum, frame):
    raise SystemExit(0)


def main(argv: list[str]) -> None:
    idle, path = (float(argv[1]) or None, argv[2]) if argv[0] == "--idle" else (None, argv[0])
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the stop button is the kernel's, not ours
    try:
        preload()
    except Exception as exc:  # noqa: BLE001 - said on stdout, where the kernel waits for "ready"
        print(f"error: {exc}", flush=True)
        raise SystemExit(1) from None
    server = Server(path, idle)
    print("ready", flush=True)
    server.ack = os.dup(1)        # the kernel's channel for "ok" and "idle"
    log = os.open(os.path.join(os.path.dirname(path), "server.log"),   # what else it prints
                  os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    why = "signal"
    try:
        why = server.serve()
    finally:
        server.shutdown()
        remove_folder(path, keep_log=why != "idle")
        if why == "idle":
            server.tell_kernel("idle")


def remove_folder(path: str, keep_log: bool = True) -> None:
    """The socket, an empty server.log and their folder: gone when the server ends, also when its
    kernel was killed and never ran its own clean-up. A log with something in it is kept, except
    after an idle exit (nothing went wrong and no one is left to read it)."""
    folder = os.path.dirname(path)
    log = os.path.join(folder, "server.log")
    for name, keep in ((path, False), (log, keep_log and os.path.exists(log)
                                       and os.path.getsize(log) > 0)):
        try:
            if not keep:
                os.unlink(name)
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
