"""Real Unix accounts for the class tests: students who own neither the course environment nor its
install, and the folder rights a portal gives them (made by the test as root, removed after).

`students(names, homes)` makes each account (its own group, its home under `homes`, mode 0700) and
removes them afterwards; `reachable(paths)` lets others *traverse* (never list or write) the folders
above `paths`, as a site's shared install is reachable; `as_user(name, cmd)` runs a command as that student, with their HOME, from the test (root).
"""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from student_kernel import TESTERS, grant_traverse, release_traverse  # noqa: E402


def need_root() -> None:
    if os.geteuid() != 0:
        raise RuntimeError("the class tests make Unix accounts for their students: run them as "
                           "root (CI does), or run the rest of the suite with -k 'not class'")


@contextlib.contextmanager
def students(names, homes: Path):
    """Accounts `names` with homes `homes/<name>` (0700, theirs); removed (homes too) afterwards."""
    need_root()
    homes.mkdir(parents=True, exist_ok=True)
    os.chmod(homes, 0o711)
    made = []
    try:
        for name in names:
            _remove(name)                              # left by a killed earlier run
            home = homes / name
            subprocess.run(["useradd", "--no-create-home", "--user-group", "--home-dir", str(home),
                            "--shell", "/bin/bash", name], check=True, timeout=60,
                           capture_output=True)
            made.append(name)
            home.mkdir(mode=0o700, exist_ok=True)
            shutil.chown(home, name, name)
        yield {name: homes / name for name in names}
    finally:
        for name in made:
            _remove(name)


def _remove(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return
    subprocess.run(["pkill", "-KILL", "-u", name], timeout=30, capture_output=True)
    subprocess.run(["userdel", name], timeout=60, capture_output=True)


@contextlib.contextmanager
def reachable(paths):
    """Others may traverse every folder above each of `paths` while the block runs (o+x where it
    was missing, never read or write), through the suite's registry of such rights
    (tests/student_kernel.py): the modes found come back when no session holds them any more."""
    grant_traverse(paths)
    try:
        yield
    finally:
        release_traverse()


def user_env(name: str, base: dict | None = None) -> dict:
    """`base` (default os.environ) as the student's: their HOME, USER and LOGNAME, none of the
    tester's own per-user settings (student_kernel.TESTERS, XDG_*)."""
    entry = pwd.getpwnam(name)
    env = {k: v for k, v in (base or os.environ).items()
           if k not in TESTERS and not k.startswith("XDG_")}
    env.update(HOME=entry.pw_dir, USER=name, LOGNAME=name)
    return env


def as_user(name: str, cmd: list[str], env: dict | None = None, timeout: float = 300,
            cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run `cmd` as student `name` (their uid, group and groups; their HOME), capturing text."""
    prefix = ["setpriv", f"--reuid={name}", f"--regid={name}", "--init-groups"]
    return subprocess.run(prefix + list(cmd), env=user_env(name, env), capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or pwd.getpwnam(name).pw_dir)
