"""dltutor — the helper library behind the distributed deep learning course.

One subpackage per topic (see docs/LAYOUT.md):

  core/       what every topic shares: env, device, dist, course files, args, tables, plots
  data/       CIFAR-10 (real, staged offline) and the labelled synthetic stand-in
  launch/     start a lab on N ranks from a kernel or a shell: torchrun, horovodrun, Slurm
  single/     notebook 01: one device, made fast
  ddp/        notebook 02: data parallelism with DDP
  horovod/    notebook 03: Horovod's synthetic benchmark
  zero/       notebook 04: ZeRO and out-of-core BERT with DeepSpeed
  allreduce/  notebook 05: ring all-reduce, seen and measured
  doctor.py   the environment table (`from dltutor.doctor import doctor`, `python -m dltutor doctor`)
  kernel.py   the course's Jupyter kernel: install (with the labs' settings) and uninstall
  cli.py      `python -m dltutor ...`

Import cost is kept small: subpackages (and the engines they use, DeepSpeed and Horovod) are
imported only when first used, e.g. `from dltutor.single import train`.
"""
from __future__ import annotations

import importlib
import os

__version__ = "0.1.0"

# DeepSpeed's ops (cpu_adam, aio) are compiled once by the set-up into the course cache; every
# process that imports dltutor (kernel, labs, the ranks they launch) looks for them there.
# They are built with ninja: always this environment's own (see core.env.path_with_env_bin).
from dltutor.core.env import extensions_dir as _extensions_dir  # noqa: E402 (light: os, pathlib)
from dltutor.core.env import path_with_env_bin as _path_with_env_bin  # noqa: E402

# A shared read-only folder (a class on one install) becomes the user's own copy of it.
os.environ["TORCH_EXTENSIONS_DIR"] = str(_extensions_dir())
os.environ["PATH"] = _path_with_env_bin(os.environ.get("PATH", ""))


def __getattr__(name):
    if not name.startswith("_"):
        try:  # a subpackage on first use: dltutor.core, dltutor.launch, ...
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'dltutor' has no attribute {name!r}")


def __dir__():
    import pkgutil
    return sorted(set(globals()) | {m.name for m in pkgutil.iter_modules(__path__)})
