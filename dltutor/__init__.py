"""dltutor — the helper library behind the distributed deep learning course.

Import cost is kept small: submodules (and the engines they use, DeepSpeed and Horovod) are
imported only when a name from them is first used, e.g. `dltutor.doctor()`.
"""
from __future__ import annotations

import importlib
import os

__version__ = "0.1.0"

# DeepSpeed's ops (cpu_adam, aio) are compiled once by the set-up into the course cache; every
# process that imports dltutor (kernel, labs, the ranks they launch) looks for them there.
from dltutor.env import extensions_dir as _extensions_dir  # noqa: E402 (light: os, pathlib)

os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(_extensions_dir()))

# public name -> submodule that defines it
_EXPORTS = {
    "fast_mode": "env", "pick": "env", "device": "env", "backend": "env",
    "seed_everything": "env", "data_dir": "env", "cache_dir": "env", "hardware_label": "env",
}

def doctor(engines_too: bool = True) -> None:
    """Print the environment table (rows marked `!!` say what to do); `dltutor.envcheck.collect()`
    returns the rows themselves."""
    from dltutor.envcheck import doctor as _doctor
    _doctor(engines_too)

def __getattr__(name):
    if name in _EXPORTS:
        module = importlib.import_module(f"{__name__}.{_EXPORTS[name]}")
        return getattr(module, name)
    if not name.startswith("_"):
        try:  # any submodule on first use: dltutor.data, dltutor.launch, ...
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'dltutor' has no attribute {name!r}")

def __dir__():
    import pkgutil
    mods = {m.name for m in pkgutil.iter_modules(__path__)}
    return sorted(set(globals()) | set(_EXPORTS) | mods)
