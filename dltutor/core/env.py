"""What is here: fast mode, sizes, seeding, cores and the folders the course uses.

The device and backend are decided in `dltutor.core.device`; the course's own files are found by
`dltutor.core.course`.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

FAST_ENV = "DLTUTOR_FAST"
DATA_ENV = "DLTUTOR_DATA"
CACHE_ENV = "DLTUTOR_CACHE"


def fast_mode() -> bool:
    """True when `DLTUTOR_FAST` is set to a true value (tests and CI set it)."""
    return os.environ.get(FAST_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def pick(full, fast):
    """Return `fast` in fast mode, else `full`: one line per size in a parameters cell."""
    return fast if fast_mode() else full


def recorded_cache() -> Path:
    """The file in this Python environment where the set-up records its cache (`DLTUTOR_CACHE`)."""
    import sys
    return Path(sys.prefix) / "etc" / "dltutor" / "cache"


def cache_dir() -> Path:
    """Where built wheels, compiled ops and downloads are kept (outside the repo): `DLTUTOR_CACHE`,
    else the cache the set-up of this environment used (a venv on scratch keeps its cache there
    too, whatever the shell that runs it exports), else `~/.cache/dltutor`."""
    root = os.environ.get(CACHE_ENV)
    if not root and recorded_cache().is_file():
        root = recorded_cache().read_text().strip()
    return Path(root or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "dltutor"))


def runs_dir() -> Path:
    """Where launches keep their logs: `DLTUTOR_RUNS`, else `<cache>/runs` (the pre-flight gives
    each notebook its own)."""
    return Path(os.environ.get("DLTUTOR_RUNS") or cache_dir() / "runs")


def data_dir() -> Path:
    """The data root: `DLTUTOR_DATA`, else `<cache>/data`."""
    return Path(os.environ.get(DATA_ENV) or cache_dir() / "data")


def seed_everything(seed: int = 0, rank: int = 0) -> int:
    """Seed python, numpy and torch; each rank gets `seed + rank` so data shards differ."""
    import numpy as np
    import torch
    s = int(seed) + int(rank)
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)
    return s


def cpu_cores() -> int:
    """Cores this process may use (the cgroup/affinity view, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def threads_per_rank(nproc: int) -> int:
    """Intra-op threads for each of `nproc` ranks so they do not oversubscribe the cores."""
    return max(1, cpu_cores() // max(1, int(nproc)))


def extensions_dir() -> Path:
    """Where DeepSpeed's JIT-compiled ops live: TORCH_EXTENSIONS_DIR, else one folder per Python
    environment under `<cache>/torch_extensions` (a build records the environment's paths, so two
    environments sharing one folder would rebuild each other's ops)."""
    import hashlib
    import sys
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    tag = hashlib.sha1(os.path.realpath(sys.prefix).encode()).hexdigest()[:10]
    return cache_dir() / "torch_extensions" / f"env-{tag}"


def path_with_env_bin(path: str) -> str:
    """`path` (a PATH) with this Python environment's bin folder first when it holds pip's ninja.

    DeepSpeed builds and loads its ops with the first `ninja` on PATH. A system ninja of another
    version (Debian's 1.11 beside pip's 1.13) rewrites the build folder's logs in its own way, and
    the next process that finds the other ninja compiles the op again (30-50 s on 2 cores)."""
    import sys
    bindir = os.path.dirname(sys.executable)
    if not os.path.isfile(os.path.join(bindir, "ninja")):
        return path
    return os.pathsep.join([bindir] + [p for p in path.split(os.pathsep) if p and p != bindir])


def offline() -> bool:
    """True when `DLTUTOR_OFFLINE` is set to a true value: never touch the network (tests set it)."""
    return os.environ.get("DLTUTOR_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
