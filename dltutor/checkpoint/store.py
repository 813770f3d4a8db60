"""Checkpoint folders on disk: save, find the newest complete one, load it (or start fresh).

    root/step-000004/   .metadata + __0_0.distcp, __1_0.distcp, ...   (one file per rank)
    root/step-000008/   ...

`torch.distributed.checkpoint` (DCP) writes each rank's shards, then rank 0 writes `.metadata`
last: a folder is complete exactly when its `.metadata` exists. A save killed half-way leaves a
folder without one; `newest_complete` passes it over and `load` never reads it.

`save_async` runs DCP's `async_save` on a process group of its own (`async_group()`): on the
default gloo group the save's collectives and the training loop's interleave and hang (measured
here, 2 of 2 runs; with a group of its own 3 of 3 finished; torchtitan does the same). It
returns a future of the save's end: wait on it (`.result()`) before the next save and before the
process ends.

`load` turns a checkpoint of another model into one ValueError naming the first missing or
mismatched key; DCP itself raises `CheckpointException`, which is a BaseException (so `except
Exception` does not catch it) and lists a traceback per rank. Every function works unchanged on
gloo/CPU and NCCL/GPU: DCP reads into the tensors the model already has, on the rank's device.

A disk that fills mid-save: DCP's exception says `[Errno 28] No space left on device`, or only
torch.save's `unexpected pos 704 vs 598` (the OS's error then hides in its context). `save` and
`save_async`'s future turn it into one `DiskFull` (an OSError, ENOSPC) naming the folder, the file
system and its free space, and what to do. The folder has no `.metadata` (DCP writes it only
after every rank's shards), so the previous checkpoint is still the newest complete one and
`load` resumes from it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import warnings
from concurrent.futures import Future
from pathlib import Path

import torch.distributed as tdist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from dltutor.core import dist

KEY = "app"                                   # the name of the app state in every checkpoint
_STEP = re.compile(r"step-(\d+)$")


def _alone() -> bool:
    """True in a process with no process group: DCP then saves/loads as one process."""
    return not (tdist.is_available() and tdist.is_initialized())


def step_dir(root, step: int) -> Path:
    """`root/step-<NNNNNN>`: where the checkpoint of `step` goes."""
    return Path(root) / f"step-{int(step):06d}"


def is_complete(path) -> bool:
    """True when DCP finished this folder: its `.metadata` (written last) is there."""
    return (Path(path) / ".metadata").is_file()


def checkpoints(root) -> list[tuple[int, Path]]:
    """Every `step-N` folder under `root` (complete or not), oldest first; [] if there is none."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP.match(p.name))]
    return sorted(found)


def newest_complete(root) -> Path | None:
    """The newest folder of `root` that has `.metadata`; None when there is none."""
    done = [p for _, p in checkpoints(root) if is_complete(p)]
    return done[-1] if done else None


def save(root, app, writer=None) -> Path:
    """Save `app` (a state.AppState, its `step` set) into `step_dir(root, app.step)`; every rank
    calls it (a collective on the default group). Returns the folder. `writer`: a DCP storage
    writer for that folder (default: DCP's FileSystemWriter; restarts.TornWriter dies mid-save)."""
    path = step_dir(root, app.step)
    try:
        with _quiet():
            dcp.save({KEY: app}, checkpoint_id=str(path), storage_writer=writer,  # DCP: shards,
                     no_dist=_alone())                                              # then .metadata
    except CheckpointException as exc:  # a BaseException: `except Exception` misses it
        if full := disk_full(root, path, exc):
            raise full from None
        raise
    return path


class DiskFull(OSError):
    """A save that ran out of space (errno ENOSPC): the message says where and what to do."""


_FULL = (errno.ENOSPC, errno.EDQUOT)


def _out_of_space(exc) -> bool:
    """True when `exc` (a CheckpointException: each rank's failure) or its causes say ENOSPC/EDQUOT."""
    seen, todo = set(), [exc, *[f[0] if isinstance(f, tuple) else f
                                for f in getattr(exc, "failures", {}).values()]]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if getattr(e, "errno", None) in _FULL or any(os.strerror(n) in str(e) for n in _FULL):
            return True
        todo += [e.__cause__, e.__context__]
    return False


def folder_bytes(path) -> int:
    """The bytes of the files in folder `path` (0 when it is missing)."""
    p = Path(path)
    return sum(f.stat().st_size for f in p.iterdir() if f.is_file()) if p.is_dir() else 0


def disk_full(root, path, exc) -> DiskFull | None:
    """A DiskFull for a save into `path` that failed with `exc`, when the disk is why: the OS said
    ENOSPC/EDQUOT, or the file system has less room left than the newest complete checkpoint
    takes (at least one block); else None (another failure: re-raise it)."""
    usage, block = shutil.disk_usage(root), os.statvfs(root).f_frsize
    previous = newest_complete(root)
    if not (_out_of_space(exc) or usage.free < max(folder_bytes(previous or ""), block)):
        return None
    mb = lambda n: f"{n / 1e6:.3g} MB"  # noqa: E731
    keep = (f"the newest complete checkpoint, {previous.name}, still loads and a restart resumes "
            f"from it" if previous else "there is no complete checkpoint: a restart starts fresh")
    return DiskFull(errno.ENOSPC, f"checkpoint {path} could not be written: the file system "
                    f"holding {root} is full ({mb(usage.free)} free of {mb(usage.total)}; "
                    f"{mb(folder_bytes(path))} of this checkpoint got written, the last "
                    f"complete one takes {mb(folder_bytes(previous or ''))}). {path.name} has no "
                    f".metadata, so it is never loaded; {keep}. Free space there (older step "
                    f"folders, the torn {path.name}) or save to a larger file system. DCP said: "
                    f"{_first_failure(exc).strip().splitlines()[-1]}")


def async_group():
    """A gloo group for async saves only (every rank must call it, once); None without a group."""
    if not _alone():
        return tdist.new_group(backend="gloo")  # DCP: the async save's own group (no deadlock)
    return None


def torn(root) -> list[str]:
    """The names of the folders newer than the newest complete one that lack `.metadata`."""
    path = newest_complete(root)
    return [p.name for _, p in checkpoints(root)
            if not is_complete(p) and (path is None or p.name > path.name)]


def save_async(root, app, group):
    """Start saving `app` into `step_dir(root, app.step)` in a background thread and return a
    future of its end (DCP's, with a full disk raised as DiskFull). The state is copied to CPU
    memory before this returns, so training may go on; the save's collectives run on `group`
    (from `async_group()`), never on the training loop's."""
    path = step_dir(root, app.step)
    with _quiet():
        started = dcp.async_save({KEY: app}, checkpoint_id=str(path),  # DCP: in a thread
                                 process_group=group, no_dist=_alone())  # DCP: its own group
    done = Future()   # DCP's future, with a full disk turned into DiskFull as `save` does

    def settle(f):
        exc = f.exception()
        if exc is None:
            done.set_result(f.result())
            return
        try:
            full = disk_full(root, path, exc) if isinstance(exc, CheckpointException) else None
        except OSError as other:  # the file system cannot even be asked: say DCP's error
            full = None
            exc.add_note(f"(and asking {root}'s file system for its free space failed: {other})")
        done.set_exception(full or exc)
    started.add_done_callback(settle)
    return done


def _first_failure(exc: CheckpointException) -> str:
    """The message of the first rank's exception inside a CheckpointException."""
    for rank in sorted(exc.failures):
        inner = exc.failures[rank]
        inner = inner[0] if isinstance(inner, tuple) else inner
        return str(inner)
    return str(exc)


def _key_problem(message: str) -> str:
    """'missing key X' / 'mismatched key X (...)' from DCP's planner messages, else the message."""
    if m := re.search(r"Missing key in checkpoint state_dict: (.+?)\.?$", message, re.M):
        return f"missing key {m.group(1)} (this run has it, the checkpoint does not)"
    if m := re.search(r"Size mismatch between saved (.+) and current: (.+) for (\S+)", message):
        return f"mismatched key {m.group(3)}: saved {m.group(1)}, this run {m.group(2)}"
    return message.strip().splitlines()[-1] if message.strip() else message


def model_mismatch(path, app) -> str | None:
    """The first key, in the model's own order, that the checkpoint lacks or shapes otherwise,
    else the first key of the checkpoint's model that this model lacks (read from `.metadata`
    alone); None when they fit or the model is not loaded."""
    if "model" not in app.parts:
        return None
    saved = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    prefix = f"{KEY}.model."
    mine = {prefix + k: v for k, v in app.state_dict()["model"].items()}
    for key, value in mine.items():
        if key not in saved:
            return f"missing key {key} (this model has it, the checkpoint does not)"
        size = getattr(saved[key], "size", None)
        if size is not None and hasattr(value, "shape") and tuple(size) != tuple(value.shape):
            return f"mismatched key {key}: saved {tuple(size)}, this model {tuple(value.shape)}"
    extra = [k for k in saved if k.startswith(prefix) and k not in mine]
    return f"unexpected key {extra[0]} (in the checkpoint, not in this model)" if extra else None


@contextlib.contextmanager
def _quiet():
    """DCP warns on every save/load with no_dist=True that it assumes one process: we chose it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")
        yield


def load(root, app) -> int | None:
    """Load the newest complete checkpoint under `root` into `app` and return its step; print one
    line and return None when there is none (an empty or missing folder: a fresh start). A
    checkpoint that does not fit (another model, another number of ranks for the `rng` part)
    raises one ValueError naming the first missing or mismatched key."""
    path, skipped = newest_complete(root), torn(root)
    if skipped:
        dist.rank_print(f"skipping {', '.join(skipped)} in {root}: no .metadata (a save that did "
                        "not finish)", main_only=True)
    if path is None:
        dist.rank_print(f"no checkpoint in {root}: fresh start", main_only=True)
        return None
    problem = model_mismatch(path, app)
    if problem is None:
        try:
            with _quiet():
                dcp.load({KEY: app}, checkpoint_id=str(path), no_dist=_alone())  # DCP: into place
        except CheckpointException as exc:  # a BaseException: `except Exception` misses it
            problem = _key_problem(_first_failure(exc))
    if problem is not None:
        raise ValueError(f"checkpoint {path} does not fit this run: {problem}")
    return app.step
