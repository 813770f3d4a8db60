"""What is here: fast mode, sizes, seeding, cores and the folders the course uses.

Two kinds of folders. Shared, and possibly read-only to the student: the set-up's cache
(`cache_dir`: wheels, compiled ops, data) and the installed course. Per user and writable:
`user_dir` (exercise work files, launch logs, figures, the user's copy of the compiled ops), never
inside the set-up's cache, so that a class can share one install. The device and backend are
decided in `dltutor.core.device`; the course's own files are found by `dltutor.core.course`.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

FAST_ENV = "DLTUTOR_FAST"
DATA_ENV = "DLTUTOR_DATA"
CACHE_ENV = "DLTUTOR_CACHE"
USER_ENV = "DLTUTOR_USER_DIR"
SITE_ENV = "DLTUTOR_SITE"


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


def user_name() -> str:
    import getpass
    try:
        return getpass.getuser()
    except (KeyError, OSError):     # a uid with no passwd entry (some containers)
        return str(os.getuid())


def _shell_expand(text: str) -> str | None:
    """`$VAR`, `${VAR}` and `${VAR:-default}` as the job's shell would; None if one is unset."""
    import re

    def one(m):
        name, default = m.group(1) or m.group(3), m.group(2)
        value = os.environ.get(name) or default
        if value is None:
            raise KeyError(name)
        return value
    try:
        return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", one, text)
    except KeyError:
        return None


def site_scratch() -> Path | None:
    """The scratch folder of the site profile named by `DLTUTOR_SITE`, when it is set and every
    variable in the profile's `scratch` is set here; else None."""
    import tomllib
    from dltutor.core import course
    name = os.environ.get(SITE_ENV)
    if not name:
        return None
    try:
        profile = tomllib.loads((course.lab("sites") / f"{name}.toml").read_text())
    except (OSError, course.CourseNotFound, tomllib.TOMLDecodeError):
        return None
    scratch = _shell_expand(str(profile.get("scratch", "")))
    return Path(scratch) if scratch and os.path.isabs(scratch) else None


def user_dir() -> Path:
    """The user's own writable folder: `DLTUTOR_USER_DIR`, else `<site scratch>/<user name>`
    (the profile of `DLTUTOR_SITE`), else `$XDG_CACHE_HOME/dltutor` (`~/.cache/dltutor`).
    Never the set-up's recorded cache: that one is shared by a class and may be read-only."""
    if os.environ.get(USER_ENV):
        return Path(os.environ[USER_ENV]).expanduser()
    scratch = site_scratch()
    if scratch is not None:
        return scratch / user_name()
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "dltutor"


def user_folder(*parts: str) -> Path:
    """`user_dir()/parts...`, made if missing; one clear error when it cannot be written."""
    return made(user_dir().joinpath(*parts))


def made(path) -> Path:
    """The folder `path`, made if missing; when it cannot be, one error that says what to set."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PermissionError(f"cannot write your course folder {path} ({exc.strerror}): set "
                              f"{USER_ENV} to a folder of yours (e.g. on scratch)") from None
    return path


def runs_dir() -> Path:
    """Where launches keep their logs: `DLTUTOR_RUNS`, else `<user_dir>/runs` (the pre-flight
    gives each notebook its own)."""
    return Path(os.environ.get("DLTUTOR_RUNS") or user_dir() / "runs")


def figures_dir(notebook: str) -> Path:
    """Where notebook `notebook` (e.g. "06") saves its plots as PNG: `<user_dir>/figures/<nb>`."""
    return user_folder("figures", str(notebook))


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


def rng_state() -> dict:
    """This process's generator states (python, numpy, torch CPU, every CUDA one when CUDA is in
    use), as tensors and plain values only, so `torch.load(weights_only=True)` and DCP both take
    them. `set_rng_state` puts them back: a resumed run draws what the uninterrupted one drew."""
    import numpy as np
    import torch
    _, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": {"keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached": float(cached)}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Put back what `rng_state` returned (the CUDA states only where CUDA is available here)."""
    import numpy as np
    import torch
    random.setstate(_as_tuple(state["python"]))
    torch.set_rng_state(state["torch"].cpu())
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].cpu().numpy().astype(np.uint32), int(n["pos"]),
                         int(n["has_gauss"]), float(n["cached"])))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def _as_tuple(value):
    """A state given back as lists (DCP's containers are lists), as the tuples python wants."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, (list, tuple)) else value


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
    environments sharing one folder would rebuild each other's ops). When that folder is shared and
    not writable by this user (a class on one install), the user's own copy of it (see
    `user_extensions`): loading an op takes a lock file in its folder, even when nothing is built."""
    import hashlib
    import sys
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        shared = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    else:
        tag = hashlib.sha1(os.path.realpath(sys.prefix).encode()).hexdigest()[:10]
        shared = cache_dir() / "torch_extensions" / f"env-{tag}"
    if writable(shared):
        return shared
    return user_extensions(shared)


def writable(folder) -> bool:
    """`folder` can be written by this user, or made where it would go."""
    folder = Path(folder)
    while not folder.exists():
        if folder.parent == folder:
            return False
        folder = folder.parent
    return os.access(folder, os.W_OK | os.X_OK)


def user_extensions(shared: Path) -> Path:
    """The user's copy of the shared ops folder `shared` under `<user_dir>/torch_extensions`: what
    is there is copied once per op (object files linked, not copied: ninja only reads their
    times), so ops load without a build; ops the set-up did not build compile there."""
    import hashlib
    import shutil
    tag = hashlib.sha1(str(shared.resolve()).encode()).hexdigest()[:10]
    mine = user_dir() / "torch_extensions" / f"{shared.name}-{tag}"
    mine.mkdir(parents=True, exist_ok=True)
    try:
        ops = sorted(p for p in shared.iterdir() if p.is_dir())
    except OSError:            # not there, or not readable: the ops compile in the user's copy
        ops = []
    for op in ops:
        target = mine / op.name
        if target.exists():
            continue
        partial = mine / f".{op.name}.copying-{os.getpid()}"
        shutil.copytree(op, partial, symlinks=True, ignore=shutil.ignore_patterns("lock"),
                        copy_function=_link_objects_copy_rest)
        try:
            partial.rename(target)
        except OSError:        # another process of this user finished first
            shutil.rmtree(partial, ignore_errors=True)
    return mine


def _link_objects_copy_rest(src: str, dst: str) -> None:
    import shutil
    if src.endswith(".o"):
        os.symlink(os.path.abspath(src), dst)
    else:
        shutil.copy2(src, dst)


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
