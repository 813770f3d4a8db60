"""What a pipeline stage did, in program order: for the `06-pipeline` check, beside
`dltutor.grading.calls` (which records each send/recv/isend/irecv when it is called).

    log = CallLog(phase="forward")
    with stage_runs(stage, log), p2p_watched(log, rank, peer, namespaces=[fn.__globals__]):
        with watched(log, record=("send", "recv", "isend", "irecv"), ...):
            fn(stage, ...)
    log.calls   # ... {"name": "stage", "rows": 2, "sum": ...}, {"name": "isend", ...},
                #     {"name": "wait", "of": 0}, ...

Added to the same log, so their order against the sends and receives is the order the student's
code ran them in (one thread per rank):

  - `stage_runs`: one "stage" entry each time the stage starts on a tensor (a pre-hook on its
    first layer, so calling the layers one by one counts too): its rows and the sum of its input;
  - `p2p_watched`: one "wait" entry when the request of an irecv the student posted completes
    (`wait()`, or `is_completed()` answering True): a blocking recv completes where it is
    recorded, an irecv where it is waited on. And every message is checked against its peer
    before it moves: each isend (send calls it) publishes its dtype and size in the process
    group's store, and each receive (recv calls irecv) compares its buffer with the message of
    the same number, so a float32 buffer for a float64 activation, a buffer of the wrong size, or
    a receive that no send will ever match raise a RuntimeError that says which, instead of
    gloo aborting the process or waiting until its timeout.

Both are undone on exit. The functions are replaced in torch.distributed, in its c10d module and
in the student's namespaces before `watched` replaces them again, so `watched` records the
student's call and these run beneath it.
"""
from __future__ import annotations

import contextlib
import time

PREFIX = "dltutor/p2p/"
POLL_S = 0.01


@contextlib.contextmanager
def stage_runs(stage, log):
    """A "stage" entry in `log` each time `stage` (its first layer) starts on a tensor."""
    first = next(iter(stage.children()), stage)

    def pre_hook(module, args):
        t = args[0] if args else None
        if hasattr(t, "shape"):
            log.calls.append({"name": "stage", "phase": log.phase,
                              "rows": int(t.shape[0]) if t.dim() else 0,
                              "sum": float(t.detach().double().sum())})
    handle = first.register_forward_pre_hook(pre_hook)
    try:
        yield log
    finally:
        handle.remove()


class _Request:
    """An irecv's request: its completion goes into the log, the rest is the request's own."""

    def __init__(self, work, log, index: int):
        self._work, self._log, self._index = work, log, index

    def _done(self):
        self._log.calls.append({"name": "wait", "phase": self._log.phase, "of": self._index})

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        self._done()
        return out

    def is_completed(self):
        done = self._work.is_completed()
        if done:
            self._done()
        return done

    def __getattr__(self, name):
        return getattr(self._work, name)


def _describe(tensor) -> str:
    return f"{str(tensor.dtype).replace('torch.', '')} {tuple(tensor.shape)}"


class _Peers:
    """The messages' descriptions, through the store: what each send was, for the receiver."""

    def __init__(self, store, rank: int, peer: int, timeout: float):
        self.store, self.rank, self.peer, self.timeout = store, rank, peer, timeout
        self.sent = self.received = 0

    def publish(self, tensor, done: bool = False) -> None:
        """Say what this rank's next message is (or, `done`, how many it sent in all)."""
        if done:
            self.store.set(f"{PREFIX}{self.rank}/total", str(self.sent))
            return
        self.store.set(f"{PREFIX}{self.rank}/{self.sent}", f"{tensor.dtype}|{tensor.numel()}|"
                       f"{_describe(tensor)}")
        self.sent += 1

    def expect(self, tensor) -> None:
        """Raise unless the peer's message number `received` will fit `tensor` (dtype, size)."""
        rank, j = self.rank, self.received
        key, total = f"{PREFIX}{self.peer}/{j}", f"{PREFIX}{self.peer}/total"
        self.received += 1
        deadline = time.monotonic() + self.timeout
        while not self.store.check([key]):
            if self.store.check([total]):
                n = int(self.store.get(total))
                raise RuntimeError(f"rank {rank} posts receive {j} (counting from 0), but the "
                                   f"other rank finished after {n} send(s): post one receive per "
                                   "message sent, as many as micro-batches")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rank {rank} waited {self.timeout:.0f} s for message {j} "
                                   "(counting from 0): no send for it came")
            time.sleep(POLL_S)
        dtype, numel, what = self.store.get(key).decode().split("|")
        if dtype != str(tensor.dtype) or int(numel) != tensor.numel():
            raise RuntimeError(f"rank {rank}'s receive buffer {j} is {_describe(tensor)}, but the "
                               f"message it receives is {what}: allocate the buffer with the "
                               "activation's shape and dtype (the dtype of data)")


@contextlib.contextmanager
def p2p_watched(log, rank: int, peer: int, namespaces=(), timeout: float = 30.0):
    """Record irecv completions in `log`; check each message against its peer's (see above)."""
    import torch.distributed as tdist
    import torch.distributed.distributed_c10d as c10d
    real = {"isend": tdist.isend, "irecv": tdist.irecv}
    peers = _Peers(c10d._get_default_store(), rank, peer, timeout)

    def isend(tensor, *args, **kwargs):
        peers.publish(tensor)
        return real["isend"](tensor, *args, **kwargs)

    def irecv(tensor, *args, **kwargs):
        peers.expect(tensor)
        work = real["irecv"](tensor, *args, **kwargs)
        last = log.calls[-1] if log.calls else {}
        if work is None or last.get("name") != "irecv" or "of" in last:
            return work                 # inside recv: it completes where recv is recorded
        last["of"] = sum(c["name"] in ("recv", "irecv") for c in log.calls) - 1
        return _Request(work, log, last["of"])

    mine = {"isend": isend, "irecv": irecv}
    saved = []
    for space in (vars(tdist), vars(c10d), *namespaces):
        for key, value in list(space.items()):
            for name, fn in real.items():
                if value is fn:
                    saved.append((space, key, value))
                    space[key] = mine[name]
    try:
        yield log
    finally:
        for space, key, value in reversed(saved):
            space[key] = value
        with contextlib.suppress(Exception):
            peers.publish(None, done=True)
