"""Watch the communication the student's code makes: record the calls allowed, refuse the rest.

    log = CallLog()
    with watched(log, record=("all_reduce",), namespaces=[fn.__globals__]):
        log.phase = "forward"
        out = fn(...)
    log.calls      # [{"name": "all_reduce", "shape": [6, 8], "phase": "forward", "sum": ...}, ...]

Inside `watched`, every communication function of torch.distributed (`COMMUNICATION`) that is not
in `record` or `allow` raises a RuntimeError that says what the exercise allows; the `record`ed
ones run as usual and add one entry per call to the log (name, shape and dtype of the tensor, the
peer rank of a point-to-point call, the sum of what a send sends, the log's `phase` at the time).
`allow`ed ones run unrecorded (e.g. `batch_isend_irecv`, whose isend/irecv are recorded).

The functions are replaced in `torch.distributed`, in `torch.distributed.distributed_c10d`, and in
every namespace in `namespaces` (the student's module globals), so `from torch.distributed import
all_reduce` at the top of the student's script is watched as well. Everything is put back on exit.
Used in the launched ranks by the exercises whose checks count messages (notebooks 05 and 06).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_tensor", "all_gather",
               "all_gather_into_tensor", "all_gather_object", "reduce", "broadcast",
               "broadcast_object_list", "all_to_all", "all_to_all_single", "scatter", "gather",
               "barrier", "monitored_barrier")
POINT_TO_POINT = ("send", "recv", "isend", "irecv", "batch_isend_irecv")
COMMUNICATION = COLLECTIVES + POINT_TO_POINT


@dataclass
class CallLog:
    phase: str = ""                               # set by the harness: "forward", "backward", ...
    calls: list = field(default_factory=list)     # one dict per recorded call, in call order

    def of(self, *names: str, phase: str | None = None) -> list[dict]:
        return [c for c in self.calls
                if c["name"] in names and (phase is None or c["phase"] == phase)]


def _peer(name: str, args, kwargs):
    """The peer's rank: `dst`/`src` (positional or keyword) or `group_dst`/`group_src` (how
    torch 2.14's batch_isend_irecv passes it; the same number in the default group)."""
    key = "dst" if name in ("send", "isend") else "src"
    value = kwargs.get(key, args[1] if len(args) > 1 else None)
    if value is None and kwargs.get("group") is None:
        value = kwargs.get(f"group_{key}")
    return int(value) if isinstance(value, int) else None


def _entry(name: str, log: CallLog, args, kwargs) -> dict:
    tensor = args[0] if args else kwargs.get("tensor")
    entry = {"name": name, "phase": log.phase}
    if hasattr(tensor, "shape"):
        entry.update(shape=list(tensor.shape), dtype=str(tensor.dtype).replace("torch.", ""))
        if name in ("send", "isend", "all_reduce"):     # what goes out, before it is changed
            entry["sum"] = float(tensor.detach().double().sum())
    if name in POINT_TO_POINT:
        entry["peer"] = _peer(name, args, kwargs)
    return entry


@contextlib.contextmanager
def watched(log: CallLog, record=(), allow=(), namespaces=(), why: str = ""):
    """Record the calls in `record`, let `allow` through, refuse every other communication."""
    import torch.distributed as tdist
    import torch.distributed.distributed_c10d as c10d

    depth = [0]                 # > 0 inside a recorded call: torch's own calls (send -> isend) pass

    def refused(name, fn):
        def call(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            raise RuntimeError(f"torch.distributed.{name} is not part of this exercise"
                               + (f": {why}" if why else ""))
        return call

    def recorded(name, fn):
        def call(*args, **kwargs):
            if depth[0]:
                return fn(*args, **kwargs)
            log.calls.append(_entry(name, log, args, kwargs))
            depth[0] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth[0] -= 1
        return call

    originals = {n: getattr(tdist, n) for n in COMMUNICATION if hasattr(tdist, n)}
    stand_in = {n: recorded(n, fn) if n in record else fn if n in allow else refused(n, fn)
                for n, fn in originals.items()}
    by_id = {id(fn): stand_in[n] for n, fn in originals.items()}
    saved = []                                   # (namespace, key, original value)
    spaces = [vars(tdist), vars(c10d), *namespaces]
    try:
        for space in spaces:
            for key, value in list(space.items()):
                if callable(value) and id(value) in by_id and space.get(key) is value:
                    saved.append((space, key, value))
                    space[key] = by_id[id(value)]
        yield log
    finally:
        for space, key, value in reversed(saved):
            space[key] = value
