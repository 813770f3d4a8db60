"""The warm start's launcher process: asks the warm server for N ranks and relays what they say.

    python -I -S warm_client.py [--say LINE] SOCKET NPROC PORT SCRIPT [ARGS...]

Started by `dltutor.launch.run` like torchrun would be (dltutor.launch.warm.WarmBackend builds
this command), with the launch's environment. Standard library only and run as a file, so it
starts in milliseconds: the ranks it asks for are forks of the server, which has torch imported.

What it does, as torchrun's agent does for its ranks (after printing LINE, when given: the
warm start's own note, from the launch that started the server):
  * checks that the rendezvous port on 127.0.0.1 is free (else "address already in use", exit 3,
    and the launch retries on another port),
  * makes a stdout and a stderr pipe per rank and hands them to the server with the request,
  * prints every line a rank writes as `[rank<N>]:<line>` (what dltutor.launch.run splits),
  * when a rank fails, says so and SIGTERMs the others STOP_GRACE s later (the launch's watchdog
    SIGKILLs later still): a survivor blocked in a collective with the dead rank gets that long
    to raise and report its own error, instead of a race against our signal that it loses
    most times (torchrun's agent polls every 0.1 s, so there the survivor's error comes or not);
  * on SIGTERM or SIGINT, SIGTERMs the ranks and a second time SIGKILLs them; if this process is
    killed outright the server sees the socket close and SIGKILLs the ranks;
  * ends with one `rank R exited with code C` line per rank that failed (`(stopped by the
    launcher)` after it when our signal ended it after a failure); exit code 1 if any failed.
"""
import json
import os
import selectors
import signal
import socket
import sys
import time

STOP_GRACE = 1.0   # s between "rank R failed" and SIGTERM to the others
FIRST_KEYS = ("DLTUTOR_LAUNCH_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
              "MASTER_ADDR", "MASTER_PORT", "DLTUTOR_WARM_START")
_signals = []


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def request(path: str, nproc: int, port: int, script: str, args: list):
    """Connect, send the request with the write ends of the ranks' pipes; the read ends."""
    pipes = [os.pipe() for _ in range(2 * nproc)]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    try:
        sock.connect(path)
    except OSError as exc:
        say(f"error: the warm start server at {path} is not there ({exc}); launch again "
            "(it is restarted) or use backend='torchrun'")
        raise SystemExit(2) from None
    req = dict(script=script, args=args, cwd=os.getcwd(), nproc=nproc, port=port,
               env=dict(os.environ), first_keys=FIRST_KEYS)
    socket.send_fds(sock, [json.dumps(req).encode()], [w for _, w in pipes])
    for _, w in pipes:
        os.close(w)
    return sock, {r: i // 2 for i, (r, _) in enumerate(pipes)}


class Relay:
    def __init__(self, sock, fds: dict, nproc: int):
        self.sock, self.nproc = sock, nproc
        self.sel = selectors.DefaultSelector()
        self.sel.register(sock, selectors.EVENT_READ, None)
        for fd, rank in fds.items():
            self.sel.register(fd, selectors.EVENT_READ, rank)
        self.partial = {fd: b"" for fd in fds}
        self.codes, self.started, self.stopping, self.open_pipes = {}, {}, 0, len(fds)
        self.stopped = set()   # ranks that ended by our signal after a failure or a stop
        self.stop_at = None    # when to SIGTERM the others after a failure

    def signal(self, sig: int) -> None:
        try:
            self.sock.send(json.dumps({"signal": int(sig)}).encode())
        except OSError:
            pass

    def on_pipe(self, fd: int, rank: int) -> None:
        data = os.read(fd, 65536)
        if not data:
            if self.partial[fd]:
                self.emit(rank, self.partial[fd])
            self.sel.unregister(fd)
            os.close(fd)
            self.open_pipes -= 1
            return
        *lines, self.partial[fd] = (self.partial[fd] + data).split(b"\n")
        for line in lines:
            self.emit(rank, line)

    def emit(self, rank: int, line: bytes) -> None:
        sys.stdout.buffer.write(b"[rank%d]:" % rank + line + b"\n")
        sys.stdout.flush()

    def on_event(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        msg = json.loads(data)
        if "error" in msg:
            say(f"error: {msg['error']}")
            self.codes.update({r: 1 for r in range(self.nproc)})
        elif "started" in msg:
            self.started[msg["started"]] = msg["pid"]
            if len(self.started) == self.nproc:
                pids = ", ".join(f"rank {r} pid {p}" for r, p in sorted(self.started.items()))
                say(f"{self.nproc} rank(s) forked from the warm start (torch already imported): "
                    f"{pids}")
        elif "exited" in msg:
            rank, code = msg["exited"], msg["code"]
            self.codes[rank] = code
            if self.stopping and self.stop_at is None and code < 0:   # our signal ended it
                self.stopped.add(rank)
            if code != 0 and not self.stopping:
                say(f"rank {rank} failed (exitcode: {code}); stopping the other ranks in "
                    f"{STOP_GRACE:g} s (SIGTERM)")
                self.stopping, self.stop_at = 1, time.monotonic() + STOP_GRACE
        return True

    def on_failure_grace(self) -> None:
        if self.stop_at is not None and time.monotonic() >= self.stop_at:
            self.stop_at = None
            if len(self.codes) < self.nproc:
                self.signal(signal.SIGTERM)

    def on_signal(self) -> None:
        while _signals:
            _signals.pop()
            first = not self.stopping or self.stop_at is not None   # nothing signalled yet
            self.stopping, self.stop_at = self.stopping + 1, None
            self.signal(signal.SIGTERM if first else signal.SIGKILL)

    def run(self) -> int:
        alive = True
        while (alive and len(self.codes) < self.nproc) or self.open_pipes:
            for key, _ in self.sel.select(timeout=0.2):
                if key.data is None:
                    alive = self.on_event() and alive
                    if not alive:
                        self.sel.unregister(self.sock)
                else:
                    self.on_pipe(key.fd, key.data)
            self.on_failure_grace()
            self.on_signal()
        failed = {r: c for r, c in sorted(self.codes.items()) if c != 0}
        for rank, code in failed.items():
            stopped = " (stopped by the launcher)" if rank in self.stopped else ""
            say(f"rank {rank} exited with code {code}{stopped}")
        if not alive and len(self.codes) < self.nproc:
            say("error: the warm start server went away before every rank had ended")
            return 1
        return 1 if failed else 0


def main(argv) -> int:
    if argv[:1] == ["--say"]:
        say(argv[1])
        argv = argv[2:]
    path, nproc, port, script, args = argv[0], int(argv[1]), int(argv[2]), argv[3], argv[4:]
    if not port_is_free(port):
        say(f"error: port {port} on 127.0.0.1: address already in use")
        return 3
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: _signals.append(signum))
    sock, fds = request(path, nproc, port, script, args)
    return Relay(sock, fds, nproc).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
