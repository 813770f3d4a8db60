"""The processes of a launch: tags that find every process, the rank of each, capacity checks,
the course copy the ranks see (`course_of_ranks`).

Every process a launch starts carries DLTUTOR_LAUNCH_ID (`TAG_ENV`) in its environment, so the
launcher, its ranks and anything they start can be found (and ended) even after losing a parent.
"""
from __future__ import annotations

import os
from pathlib import Path

import psutil

from dltutor.core import course as _course
from dltutor.core import device as _device
from dltutor.core import env as _env
from dltutor.core.dist import RANK_ENV
from dltutor.launch.backends import Backend

TAG_ENV = "DLTUTOR_LAUNCH_ID"  # every process of one launch carries it (how nothing is orphaned)
_RANK_VARS = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")

def clean_env(base: dict, backend: Backend) -> dict:
    """`base` without inherited rank variables (for back ends that start ranks locally)."""
    env = dict(base)
    if backend.local:
        for key in RANK_ENV:
            env.pop(key, None)
    return env


def course_of_ranks() -> dict:
    """DLTUTOR_COURSE for the ranks: this process's course (the copy its notebook was opened
    from), so a rank that looks up a course file (a site profile) finds the same copy, even from
    a batch job that runs elsewhere; {} when there is no course."""
    try:
        return {_course.COURSE_ENV: str(_course.course_root())}
    except _course.CourseNotFound:
        return {}


def script_path(script) -> str:
    path = Path(os.fspath(script)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"launch: no such script: {path}")
    return str(path.resolve())


def tagged_processes(tag: str) -> list:
    """Live processes that carry DLTUTOR_LAUNCH_ID=tag (zombies are already dead: skipped)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(TAG_ENV) == tag:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return found


def rank_of(proc) -> int | None:
    """The rank a running process was started as (from its environment), or None."""
    try:
        environ = proc.environ()
    except (psutil.Error, OSError):
        return None
    for name in _RANK_VARS:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return None


def gpus_hidden(env) -> bool:
    """True when `env` (a launch's extra variables) hides every GPU: CUDA_VISIBLE_DEVICES=''."""
    return env is not None and str(env.get("CUDA_VISIBLE_DEVICES", "x")).strip() in ("", "-1")


def check_capacity(nproc: int, oversubscribe: bool = False, env=None) -> None:
    """Refuse more local ranks than this node has GPUs (GPU node) or cores (CPU node).

    Two NCCL ranks cannot share one GPU, and ranks that share a core measure the sharing, not
    the method; `oversubscribe=True` does it on purpose (e.g. to show N = 4 on 2 cores). An `env`
    that hides the GPUs (`dltutor.core.device.CPU_ONLY_ENV`) makes it a CPU launch."""
    if oversubscribe:
        return
    gpus = 0 if gpus_hidden(env) else _device.gpu_count()
    cores = _env.cpu_cores()
    if gpus and nproc > gpus:
        raise ValueError(f"launch: {nproc} ranks on a node with {gpus} GPU(s): each rank needs a "
                         f"GPU of its own. Use nproc <= {gpus}, or pass oversubscribe=True to "
                         "share GPUs on purpose")
    if not gpus and nproc > cores:
        raise ValueError(f"launch: {nproc} ranks on {cores} CPU core(s): the ranks would share "
                         "cores and the run would measure that, not the method. Use nproc <= "
                         f"{cores}, or pass oversubscribe=True to do it on purpose")


def checked_request(script, nproc, args, timeout, threads, env):
    """`launch`'s arguments checked (one clear error each); returns (script path, str args)."""
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc <= 0:
        raise ValueError(f"launch: nproc must be a positive integer, got {nproc!r}")
    if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
        raise TypeError("launch: args must be a list of strings like ['--epochs', '2'], "
                        f"got {type(args).__name__} {args!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"launch: timeout must be a positive number of seconds, got {timeout!r}")
    if threads is not None and (not isinstance(threads, int) or threads <= 0):
        raise ValueError(f"launch: threads must be a positive integer or None, got {threads!r}")
    if env is not None and not hasattr(env, "items"):
        raise TypeError(f"launch: env must be a dict of variables, got {type(env).__name__}")
    return script_path(script), [str(a) for a in args]
