#!/usr/bin/env python3
"""Build (once) and load DeepSpeed's C++ ops, so no lab or test waits for a JIT compile.

    python scripts/warm_deepspeed.py [OP ...]      default: cpu_adam deepspeed_shm_comm async_io
    .venv/bin/python scripts/warm_deepspeed.py --list
    .venv/bin/python scripts/warm_deepspeed.py --if-changed   # what `make setup` runs

DeepSpeed compiles its ops with torch.utils.cpp_extension the first time they are used, into
TORCH_EXTENSIONS_DIR. We point that at `<cache>/torch_extensions/env-<hash of this venv>` (cache = DLTUTOR_CACHE, default
~/.cache/dltutor), the same place `dltutor.core.engines.engine_env()` gives labs and tests, so the
first run compiles and every later run only loads (about a second). With --if-changed (setup's
no-op run) nothing is imported when a record in that folder says these ops were built and loaded
for this environment: the same DeepSpeed, torch, ops and accelerator settings, each op's library
still there. A change to any of them (a GPU appearing among them) makes it build/load again.

Environment: DS_ACCELERATOR (default: cpu when no CUDA device is visible), DLTUTOR_CACHE,
TORCH_EXTENSIONS_DIR (overrides the cache path), MAX_JOBS (parallel compile jobs, default: cores).

Ops (name = folder in TORCH_EXTENSIONS_DIR, builder class of the accelerator):
  cpu_adam            CPUAdamBuilder       DeepSpeedCPUAdam, the optimizer of ZeRO-Offload
  deepspeed_shm_comm  ShareMemCommBuilder  CPU accelerator only: loaded by every
                                           deepspeed.init_distributed(), so warm it or each
                                           first launch compiles it (minutes on 2 cores)
  async_io            AsyncIOBuilder       NVMe offload (ZeRO-Infinity); needs libaio
                                           (Debian: libaio-dev); also builds pin_memory
An op the accelerator has no builder for (e.g. shm comm on CUDA) is reported and skipped.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

BUILDERS = {"cpu_adam": "CPUAdamBuilder", "deepspeed_shm_comm": "ShareMemCommBuilder",
            "async_io": "AsyncIOBuilder", "cpu_adagrad": "CPUAdagradBuilder",
            "cpu_lion": "CPULionBuilder"}
DEFAULT_OPS = ["cpu_adam", "deepspeed_shm_comm", "async_io"]


def setup_env() -> Path:
    """Set DS_ACCELERATOR and TORCH_EXTENSIONS_DIR before DeepSpeed is imported."""
    from dltutor.core.env import extensions_dir  # one folder per Python environment
    ext = Path(os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir())))
    ext.mkdir(parents=True, exist_ok=True)
    if "DS_ACCELERATOR" not in os.environ:
        import torch
        os.environ["DS_ACCELERATOR"] = "cuda" if torch.cuda.is_available() else "cpu"
    os.environ.setdefault("MAX_JOBS", str(len(os.sched_getaffinity(0))))
    from dltutor.core.engines import cache_cpu_info, deepspeed_arch_list
    cache_cpu_info()                      # DeepSpeed asks py-cpuinfo twice per op: once is enough
    arch = deepspeed_arch_list()          # e.g. "9.0a", which DeepSpeed's builder cannot read
    if arch is not None:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    return ext


def warm_key(ops) -> str:
    """What a build/load depends on, without importing torch or DeepSpeed."""
    import glob
    import json
    from importlib.metadata import version
    return json.dumps({"prefix": os.path.realpath(sys.prefix), "deepspeed": version("deepspeed"),
                       "torch": version("torch"), "ops": sorted(ops),
                       "gpus": sorted(glob.glob("/dev/nvidia[0-9]*")),
                       **{k: os.environ.get(k) for k in ("DS_ACCELERATOR", "TORCH_CUDA_ARCH_LIST")}})


def record_path() -> Path:
    from dltutor.core.env import extensions_dir
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or extensions_dir()) / ".dltutor-warmed"


def up_to_date(ops) -> bool:
    """The record matches this environment and every op's library is still in the folder."""
    from dltutor.core.engines import _op_built
    record = record_path()
    return (record.is_file() and record.read_text() == warm_key(ops)
            and all(_op_built(record.parent, op) for op in ops))


def warm(op: str) -> tuple[bool | None, float, str]:
    """Build/load one op; return (ok, seconds, message); ok is None when not applicable here."""
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    builder = acc.create_op_builder(BUILDERS[op])
    if builder is None or type(builder).__name__ == "NotImplementedBuilder":
        return None, 0.0, f"accelerator {acc._name!r} has no {BUILDERS[op]}: not needed here"
    if not builder.is_compatible(verbose=False):
        hint = " (Debian: apt-get install -y libaio-dev)" if op == "async_io" else ""
        return False, 0.0, f"not compatible here{hint}: {getattr(builder, 'error_log', '')}"
    t0 = time.perf_counter()
    module = builder.load(verbose=False)
    return True, time.perf_counter() - t0, f"loaded {getattr(module, '__file__', module)}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("ops", nargs="*", default=DEFAULT_OPS,
                        help=f"ops to build/load, from: {' '.join(BUILDERS)}")
    parser.add_argument("--list", action="store_true", help="show op compatibility and exit")
    parser.add_argument("--optional", nargs="*", default=[], metavar="OP",
                        help="ops whose failure is reported but does not fail the script")
    parser.add_argument("--if-changed", action="store_true",
                        help="do nothing when these ops were built and loaded for this environment")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.ops + args.optional) - set(BUILDERS))
    if unknown:
        parser.error(f"unknown op(s) {unknown}; known: {' '.join(BUILDERS)}")
    if args.if_changed and not args.list and up_to_date(args.ops):
        print(f"[warm_deepspeed] {' '.join(args.ops)}: up to date ({record_path()})", flush=True)
        return 0
    key = warm_key(args.ops)   # before setup_env() sets DS_ACCELERATOR: as setup's next run sees it

    ext = setup_env()
    from dltutor.core.engines import _op_built
    t_import = time.perf_counter()
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    print(f"[warm_deepspeed] deepspeed {deepspeed.__version__}, accelerator {acc._name}, "
          f"TORCH_EXTENSIONS_DIR={ext} (import {time.perf_counter() - t_import:.1f}s)", flush=True)
    if args.list:
        for op, cls in BUILDERS.items():
            b = acc.create_op_builder(cls)
            ok = b is not None and b.is_compatible(verbose=False)
            print(f"  {op:20s} {cls:20s} compatible={ok}")
        return 0

    failed = []
    t_all = time.perf_counter()
    for op in args.ops:
        print(f"[warm_deepspeed] {op}: building/loading ...", flush=True)
        try:
            ok, secs, msg = warm(op)
        except Exception as exc:  # a compile error: show it, go on with the other ops
            ok, secs, msg = False, 0.0, f"{type(exc).__name__}: {exc}"
        status = {True: "ok", False: "FAILED", None: "skipped"}[ok]
        print(f"[warm_deepspeed] {op}: {status} in {secs:.1f}s -- {msg}", flush=True)
        if ok is False and op not in args.optional:
            failed.append(op)
    print(f"[warm_deepspeed] total {time.perf_counter() - t_all:.1f}s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    if not failed and all(_op_built(ext, op) for op in args.ops):
        record_path().write_text(key)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
