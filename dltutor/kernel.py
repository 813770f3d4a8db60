"""The course's Jupyter kernel: register this Python (with the settings the labs need), or remove it.

    python -m dltutor kernel install                      # for you (a hub: ~/.local/share/jupyter)
    python -m dltutor kernel install --scope sys-prefix   # inside this environment (make setup)
    python -m dltutor kernel uninstall

The notebooks name the kernel `dltutor`, so Jupyter starts it without asking. A hub starts kernels
from its own Python with none of your shell's exports, so `install` writes into kernel.json the
settings a lab run from a cell needs: where the data, the cache and the compiled DeepSpeed ops
are (DLTUTOR_DATA, DLTUTOR_CACHE, TORCH_EXTENSIONS_DIR), where the course is (DLTUTOR_COURSE), and
the site (DLTUTOR_SITE) when set. Set them before `install` to choose them (e.g.
DLTUTOR_DATA=$SCRATCH/dltutor-data). DLTUTOR_USER_DIR (your own files: exercises, runs, figures)
goes only into a kernel of yours, never into one inside a shared environment.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NAME = "dltutor"
DISPLAY_NAME = "Python (dltutor)"


def kernel_env(scope: str = "user") -> dict[str, str]:
    """The settings written into kernel.json (from this process's environment and defaults).

    Shared settings always (data, cache, compiled ops, course, the site when `DLTUTOR_SITE` is
    set); `DLTUTOR_USER_DIR` (your own folder) only into a kernel of yours (scope 'user'): a kernel
    inside a shared environment must leave each student their own."""
    from dltutor.core import course, env
    values = {"DLTUTOR_DATA": str(env.data_dir()), "DLTUTOR_CACHE": str(env.cache_dir()),
              "TORCH_EXTENSIONS_DIR": str(env.extensions_dir())}
    if os.environ.get(env.SITE_ENV):
        values[env.SITE_ENV] = os.environ[env.SITE_ENV]
    if scope == "user" and os.environ.get(env.USER_ENV):
        values[env.USER_ENV] = os.environ[env.USER_ENV]
    try:
        values["DLTUTOR_COURSE"] = str(course.installed_course())
    except course.CourseNotFound:
        pass
    return values


def install(name: str = NAME, scope: str = "user", display_name: str = DISPLAY_NAME) -> Path:
    """Register the running Python as kernel `name`; returns the folder of its kernel.json.

    scope: 'user' (your Jupyter data dir), 'sys-prefix' (this environment) or a prefix path."""
    cmd = [sys.executable, "-m", "ipykernel", "install", f"--name={name}",
           f"--display-name={display_name}"]
    cmd.append({"user": "--user", "sys-prefix": "--sys-prefix"}.get(scope, f"--prefix={scope}"))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    folder = Path(out.stdout.strip().split(" in ")[-1]) if " in " in out.stdout else None
    if folder is None or not (folder / "kernel.json").is_file():
        folder = _find(name)
    spec = json.loads((folder / "kernel.json").read_text())
    spec["env"] = {**spec.get("env", {}), **kernel_env(scope)}
    spec.setdefault("metadata", {})["dltutor"] = {"python": sys.executable}
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return folder


def _find(name: str) -> Path:
    from jupyter_client.kernelspec import KernelSpecManager
    return Path(KernelSpecManager().get_kernel_spec(name).resource_dir)


def uninstall(name: str = NAME) -> Path:
    """Remove kernel `name` (wherever Jupyter finds it first); returns the folder removed."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        return Path(KernelSpecManager().remove_kernel_spec(name))
    except NoSuchKernel:
        raise LookupError(f"no Jupyter kernel named {name!r} (`jupyter kernelspec list` shows "
                          "the installed ones)") from None
