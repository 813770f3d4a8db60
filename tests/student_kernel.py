"""The notebooks' kernel as a student: a Unix user who owns neither the environment nor the course.

A class runs the notebooks as students, on an environment and a course install they cannot write;
`make test` runs as root. So when the tests run as root the session (tests/conftest.py) sets up:

- the account ACCOUNT (`useradd --system`, kept: it owns nothing outside the session's home);
- traverse (o+x, never read or write) on the folders above the environment, its base Python, the
  set-up's cache and the course that lack it (/root is 0700 where pyenv put the base Python there).
  Sessions may overlap (two pytest runs at once): each one registers itself in GRANTS, the first
  records the modes it found, and the last one to end puts them back;
- the student's HOME, a temporary folder of theirs, and the kernelspec KERNEL in a temporary
  JUPYTER_PATH, whose argv runs this file (as root) before the real kernel: it copies the connection
  file (root's, mode 0600) into the student's folder and `exec`s the kernel of the `dltutor`
  kernelspec as the student (`setpriv --reuid --regid --init-groups`, no fork: interrupts and kills
  reach the kernel itself), with their HOME, USER, LOGNAME and a DLTUTOR_ATTEMPTS of theirs, and
  no capability: a student's locked-memory limit (`ulimit -l`, 8 MiB by default), which DeepSpeed's
  NVMe offload (notebook 04) sizes its page-locked swap buffers to (dltutor.zero.swap_buffers).

    python student_kernel.py USER HOME CONNECTION_FILE -- KERNEL-ARGV...   # the kernelspec's argv
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ACCOUNT = "dltutor-student"
KERNEL = "dltutor-student"
GRANTS = Path("/tmp/dltutor-student-grants")   # root's: the modes found, the sessions holding them
# The tester's own per-user settings: the student has their own (or the defaults under their HOME).
TESTERS = ("DLTUTOR_ATTEMPTS", "DLTUTOR_USER_DIR", "DLTUTOR_RUNS", "JUPYTER_DATA_DIR",
           "JUPYTER_RUNTIME_DIR", "JUPYTER_CONFIG_DIR", "IPYTHONDIR", "MPLCONFIGDIR", "TMPDIR",
           "PYTHONPYCACHEPREFIX", "MAIL")


# ---------------------------------------------------------------- the session's set-up (root)
def account(name: str = ACCOUNT) -> pwd.struct_passwd:
    """The student's passwd entry; the account is made (a system account, no home) if missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    r = subprocess.run(["useradd", "--system", "--no-create-home", "--user-group", "--home-dir",
                        "/nonexistent", "--shell", "/usr/sbin/nologin", name],
                       capture_output=True, text=True, timeout=60)
    try:
        return pwd.getpwnam(name)     # made here, or by another session at the same moment
    except KeyError:
        raise RuntimeError(f"could not make the test account {name}: {r.stderr.strip()}") from None


def folders_to_reach(paths) -> list[Path]:
    """Every folder above (and at) each of `paths`, resolved, that others may not traverse."""
    found = []
    for path in paths:
        real = Path(os.path.realpath(path))
        for folder in [real, *real.parents]:
            if folder.is_dir() and not folder.stat().st_mode & stat.S_IXOTH and folder not in found:
                found.append(folder)
    return found


@contextlib.contextmanager
def _grants_locked():
    GRANTS.mkdir(mode=0o700, exist_ok=True)
    if GRANTS.stat().st_uid != 0 or GRANTS.is_symlink():
        raise RuntimeError(f"{GRANTS} is not root's own folder: remove it")
    with open(GRANTS / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = GRANTS / "modes.json"
        modes = json.loads(record.read_text()) if record.is_file() else {}
        yield modes
        record.write_text(json.dumps(modes, indent=1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def grant_traverse(paths) -> list[str]:
    """o+x on the folders above `paths` that lack it, for this session (see GRANTS); the modes
    found are recorded by the first session. Returns the folders this call changed."""
    changed = []
    with _grants_locked() as modes:
        (GRANTS / f"session-{os.getpid()}").touch()
        for folder in folders_to_reach(paths):
            mode = stat.S_IMODE(folder.stat().st_mode)
            modes.setdefault(str(folder), mode)
            os.chmod(folder, mode | stat.S_IXOTH)
            changed.append(str(folder))
    return changed


def release_traverse() -> list[str]:
    """This session is done: when no other live session holds GRANTS, every recorded folder gets
    its old mode back. Returns the folders restored (none while another session runs)."""
    restored = []
    with _grants_locked() as modes:
        (GRANTS / f"session-{os.getpid()}").unlink(missing_ok=True)
        for holder in GRANTS.glob("session-*"):
            if not _alive(int(holder.name.split("-", 1)[1])):
                holder.unlink(missing_ok=True)   # a session that was killed
        if not any(GRANTS.glob("session-*")):
            for folder, mode in modes.items():
                with contextlib.suppress(OSError):
                    os.chmod(folder, mode)
                    restored.append(folder)
            modes.clear()
    return restored


def make_home(entry: pwd.struct_passwd) -> Path:
    """A temporary HOME of the student's (0700, theirs), with Jupyter's runtime folder in it."""
    home = Path(tempfile.mkdtemp(prefix=f"{entry.pw_name}-home-"))
    runtime = home / ".local" / "share" / "jupyter" / "runtime"
    runtime.mkdir(parents=True)
    folder = runtime
    while folder != home.parent:
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        folder = folder.parent
    return home


def course_kernel() -> tuple[list[str], dict]:
    """(argv, env) of the `dltutor` kernelspec the notebooks name (this Python's when missing)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        spec = KernelSpecManager().get_kernel_spec("dltutor")
        return list(spec.argv), dict(spec.env or {})
    except NoSuchKernel:
        return [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"], {}


def write_kernelspec(jupyter_path: Path, entry: pwd.struct_passwd, home: Path) -> Path:
    """Kernelspec KERNEL under `jupyter_path`/kernels: the course's kernel, run as the student."""
    argv, env = course_kernel()
    folder = jupyter_path / "kernels" / KERNEL
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, os.path.abspath(__file__), entry.pw_name, str(home),
                     "{connection_file}", "--", *argv],
            "display_name": f"Python (dltutor, as {entry.pw_name})", "language": "python",
            "env": env, "metadata": {"debugger": False}}
    (folder / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    return folder


# ---------------------------------------------------------------- the kernelspec's argv (root)
def student_env(base: dict, entry: pwd.struct_passwd, home: Path) -> dict:
    """`base` as the student's: their HOME, USER, LOGNAME and attempts file, none of the tester's
    per-user settings (TESTERS, XDG_*)."""
    env = {k: v for k, v in base.items() if k not in TESTERS and not k.startswith("XDG_")}
    env.update(HOME=str(home), USER=entry.pw_name, LOGNAME=entry.pw_name,
               DLTUTOR_ATTEMPTS=str(home / "attempts.jsonl"))
    return env


def copy_connection(connection_file: str, entry: pwd.struct_passwd, home: Path) -> Path:
    """The connection file (root's, 0600) copied into the student's runtime folder, theirs, 0600."""
    copy = home / ".local" / "share" / "jupyter" / "runtime" / os.path.basename(connection_file)
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(Path(connection_file).read_bytes())
    os.chown(copy, entry.pw_uid, entry.pw_gid)
    return copy


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[3] != "--":
        sys.exit("usage: student_kernel.py USER HOME CONNECTION_FILE -- KERNEL-ARGV...")
    name, home, connection, kernel = argv[0], Path(argv[1]), argv[2], argv[4:]
    entry = pwd.getpwnam(name)
    copy = str(copy_connection(connection, entry, home))
    kernel = [copy if arg == connection else arg for arg in kernel]
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    os.execve(setpriv, [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
                        "--init-groups", "--", *kernel],
              student_env(os.environ, entry, home))


if __name__ == "__main__":
    main(sys.argv[1:])
