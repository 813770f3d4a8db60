"""The two training engines beside plain DDP: Horovod and DeepSpeed — are they here, and how to run them.

Nothing here imports horovod or deepspeed until a function is called, so `import dltutor` stays
cheap and works where an engine is missing. Each `*_info()` returns a dict that `doctor()` shows:

    {"importable": bool, "version": str | None, "details": {...}, "fix": str | None}

`engine_env()` gives the environment variables a DeepSpeed lab or test should run with.
"""
from __future__ import annotations

import os
from pathlib import Path

from dltutor.core.device import device
from dltutor.core.env import extensions_dir

HOROVOD_FIX = "run `make setup` (or: bash scripts/build_horovod.sh .venv/bin/python)"
DEEPSPEED_FIX = "run `make setup` (or: .venv/bin/pip install deepspeed)"
WARM_FIX = "run `make setup` (or: .venv/bin/python scripts/warm_deepspeed.py)"

# op name (its folder in TORCH_EXTENSIONS_DIR) -> builder class of the DeepSpeed accelerator;
# what scripts/warm_deepspeed.py builds. deepspeed_shm_comm is loaded by every
# deepspeed.init_distributed() on the CPU accelerator.
DEEPSPEED_OPS = {"cpu_adam": "CPUAdamBuilder", "deepspeed_shm_comm": "ShareMemCommBuilder",
                 "async_io": "AsyncIOBuilder", "pin_memory": "PinMemoryBuilder"}


def engine_env(nthreads: int | None = None) -> dict[str, str]:
    """Variables for a process that runs DeepSpeed (or Horovod): merge into its environment.

    DS_ACCELERATOR is `cpu` when no GPU is visible (DeepSpeed would otherwise guess), and
    TORCH_EXTENSIONS_DIR points at the cache that scripts/warm_deepspeed.py fills, so ops load
    instead of compiling. Values already set in os.environ win. `nthreads` sets OMP_NUM_THREADS.
    """
    env = {
        "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR") or device().type,
        "TORCH_EXTENSIONS_DIR": str(extensions_dir()),
    }
    arch = deepspeed_arch_list()
    if arch is not None:
        env["TORCH_CUDA_ARCH_LIST"] = arch
    if nthreads is not None:
        env["OMP_NUM_THREADS"] = str(int(nthreads))
    return env


def deepspeed_arch_list(value: str | None = None) -> str | None:
    """TORCH_CUDA_ARCH_LIST without architecture suffixes, when it has any; else None.

    Some GPU images set it to e.g. "9.0a" (Hopper's arch-specific features). DeepSpeed's op
    builder reads every entry as major.minor integers and stops with "invalid literal for int()
    with base 10: '0a'", so no op (cpu_adam, async_io) can be built there. Its ops need no
    arch-specific instructions: "9.0a" -> "9.0" (a "+PTX" suffix is kept)."""
    import re
    value = os.environ.get("TORCH_CUDA_ARCH_LIST") if value is None else value
    if not value or not re.search(r"\.\d+[a-z]", value):
        return None
    return re.sub(r"(\.\d+)[a-z]+", r"\1", value)


def apply_engine_env(nthreads: int | None = None) -> None:
    """`engine_env()` into os.environ before DeepSpeed is imported: values already set win, except
    a TORCH_CUDA_ARCH_LIST that DeepSpeed cannot read (`deepspeed_arch_list`), which is replaced.
    Also `cache_cpu_info()`."""
    for key, value in engine_env(nthreads).items():
        if key == "TORCH_CUDA_ARCH_LIST":
            os.environ[key] = value
        else:
            os.environ.setdefault(key, value)
    cache_cpu_info()


def cache_cpu_info() -> None:
    """Ask py-cpuinfo once per process. DeepSpeed's op builders ask it for the CPU's flags each
    time they load an op (twice per op: -march and the SIMD width), and py-cpuinfo answers every
    call from a new Python process (about half a CPU-second each). The CPU does not change while
    a process runs, so its first answer is kept for the later calls."""
    import functools

    import cpuinfo
    if not hasattr(cpuinfo.get_cpu_info, "cache_info"):
        cpuinfo.get_cpu_info = functools.cache(cpuinfo.get_cpu_info)


SHM_PREFIX = "deepspeed_allreduce_buffer_"


def clear_stale_deepspeed_shm(shm_dir: str = "/dev/shm") -> list[str]:
    """Remove DeepSpeed's CPU all-reduce segments that no live process maps; return their names.

    DeepSpeed's CPU accelerator names them after uid, MASTER_ADDR and MASTER_PORT only, and unlinks
    them at exit. A killed run (a timeout, a restarted kernel) leaves them behind, and the next run
    with the same names opens the dead run's buffers and waits forever on their flags. Call it
    before starting ranks, never from inside a rank (a peer's fresh segment may not be mapped yet).
    """
    try:
        names = [n for n in os.listdir(shm_dir) if n.startswith(SHM_PREFIX)]
    except OSError:
        return []
    if not names:
        return []
    mapped = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as fh:
                mapped |= {n for n in names if n in fh.read()}
        except OSError:
            continue
    stale = [n for n in names if n not in mapped]
    for name in stale:
        try:
            os.unlink(os.path.join(shm_dir, name))
        except OSError:
            pass
    return stale


def _dist_version(name: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def horovod_info() -> dict:
    """Is Horovod's PyTorch binding importable, and what was it built with (Gloo, MPI, NCCL)."""
    version = _dist_version("horovod")  # e.g. 0.28.1+torch2.14.1.cu130.cpu (our build's tag)
    info = {"importable": False, "version": version, "details": {}, "fix": HOROVOD_FIX}
    if version is None:
        info["fix"] = "Horovod is not installed: " + HOROVOD_FIX
        return info
    try:
        import horovod.torch as hvd
    except Exception as exc:  # installed but its torch extension does not load (e.g. torch changed)
        info["details"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
        info["fix"] = "Horovod does not load with this torch; rebuild: " + HOROVOD_FIX
        return info
    import torch
    details = {"gloo": hvd.gloo_built(), "mpi": hvd.mpi_built(), "nccl": hvd.nccl_built(),
               "cuda": hvd.cuda_built()}
    tag = version.partition("+")[2]
    if tag.startswith("torch"):
        built_for = tag[len("torch"):].rsplit(".", 1)[0]            # 2.14.1.cu130
        now = torch.__version__.replace("+", ".")
        details["built_for_torch"] = built_for
        if built_for != now:
            details["warning"] = f"built for torch {built_for}, running {now}"
    info.update(importable=True, details=details, fix=None)
    if not details["gloo"] and not details["mpi"]:
        info["fix"] = "Horovod has no controller (neither Gloo nor MPI); rebuild: " + HOROVOD_FIX
    return info


def _op_built(ext_dir: Path, op: str) -> bool:
    """True when a compiled library of `op` is in the extensions dir (no build is triggered)."""
    folder = ext_dir / op
    return folder.is_dir() and any(folder.glob(f"{op}*.so"))


def ops_to_build(ops) -> list[str]:
    """Of DeepSpeed's `ops` (names of DEEPSPEED_OPS), those this accelerator can build and whose
    compiled library is not in this environment's extensions folder: the first use compiles them
    (minutes). Call after `apply_engine_env()`; imports deepspeed."""
    from deepspeed.accelerator import get_accelerator
    accelerator, missing = get_accelerator(), []
    for op in ops:
        builder = accelerator.create_op_builder(DEEPSPEED_OPS[op])
        if (builder is not None and type(builder).__name__ != "NotImplementedBuilder"
                and builder.is_compatible(verbose=False) and not _op_built(extensions_dir(), op)):
            missing.append(op)
    return missing


def op_compatible(op: str) -> bool:
    """Whether this accelerator can build DeepSpeed's `op` here (async_io: libaio is present).
    Call after `apply_engine_env()`; imports deepspeed."""
    from deepspeed.accelerator import get_accelerator
    builder = get_accelerator().create_op_builder(DEEPSPEED_OPS[op])
    return (builder is not None and type(builder).__name__ != "NotImplementedBuilder"
            and bool(builder.is_compatible(verbose=False)))


def build_notice(ops) -> str | None:
    """The line to print before a run that will compile `ops_to_build(ops)`, else None."""
    missing = ops_to_build(ops)
    if not missing:
        return None
    return (f"[deepspeed] compiling op(s) {', '.join(missing)} for this environment before "
            f"training (not built in {extensions_dir()}): this can take minutes, once; {WARM_FIX}")


def deepspeed_info(check_ops: bool = True) -> dict:
    """Is DeepSpeed importable, on which accelerator, and which C++ ops are compatible / prebuilt.

    Sets DS_ACCELERATOR and TORCH_EXTENSIONS_DIR in os.environ if unset (from `engine_env()`),
    because DeepSpeed fixes its accelerator when it is first imported.
    """
    version = _dist_version("deepspeed")
    info = {"importable": False, "version": version, "details": {}, "fix": DEEPSPEED_FIX}
    if version is None:
        info["fix"] = "DeepSpeed is not installed: " + DEEPSPEED_FIX
        return info
    apply_engine_env()
    try:
        import deepspeed  # noqa: F401
        from deepspeed.accelerator import get_accelerator
        accelerator = get_accelerator()
    except Exception as exc:
        info["details"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"}
        return info
    details = {"accelerator": accelerator._name, "comm": accelerator.communication_backend_name()}
    missing = []
    if check_ops:
        ext_dir = extensions_dir()
        for op, cls in DEEPSPEED_OPS.items():
            try:
                builder = accelerator.create_op_builder(cls)
                if builder is None or type(builder).__name__ == "NotImplementedBuilder":
                    continue                       # not used with this accelerator
                compatible = builder.is_compatible(verbose=False)
            except Exception:
                compatible = False
            built = _op_built(ext_dir, op)
            details[op] = "built" if built else ("not built" if compatible else "incompatible")
            if compatible and not built:
                missing.append(op)
    info.update(importable=True, details=details,
                fix=(f"ops {', '.join(missing)} will compile on first use; {WARM_FIX}"
                     if missing else None))
    return info
