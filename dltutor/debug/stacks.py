"""Stack dumps of stuck ranks with py-spy, taken from the kernel while the job hangs.

On a cluster: log in to the node, `py-spy dump --pid <pid>` for each rank (the pid from `ps` or
the job's log). Here `StackWatch` does that during a launch: it reads the ranks' pids from their
"start" reports in the run's logs, waits until a rank reported its fault plus `delay` seconds
(the ranks are then blocked in the collective), and dumps every rank once. py-spy reads another
process's memory (ptrace): as root or with ptrace allowed (kernel.yama.ptrace_scope 0, or
SYS_PTRACE in a container); where it is refused, `dumps` holds py-spy's own message instead.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from dltutor.core.dist import METRICS_TAG

ANSI = re.compile(r"\x1b\[[0-9;]*m")     # py-spy colours its output even into a pipe


def py_spy() -> str | None:
    """The py-spy executable of this environment (or on PATH), or None."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def dump(pid: int, timeout: float = 20.0) -> str:
    exe = py_spy()
    if exe is None:
        return "py-spy is not installed in this environment"
    out = subprocess.run([exe, "dump", "--pid", str(pid)], capture_output=True, text=True,
                         timeout=timeout)
    text = out.stdout if out.returncode == 0 else out.stdout + out.stderr
    return ANSI.sub("", text).strip()


def _events(path: Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        if METRICS_TAG in line:
            try:
                out.append(json.loads(line.split(METRICS_TAG, 1)[1]))
            except ValueError:
                pass
    return out


def waiting_line(stack: str, script: str = "faulty_train.py") -> str | None:
    """The first frame of `script` (or of dltutor.debug) in a py-spy dump: where the rank waits."""
    for line in stack.splitlines():
        m = re.match(r"\s+(\S+) \((\S+):(\d+)\)", line)
        if m and (m.group(2).endswith(script) or "dltutor/debug/" in m.group(2)):
            return f"{m.group(1)} ({Path(m.group(2)).name}:{m.group(3)})"
    return None


FRAME = re.compile(r"\s+(\S+) \((\S+):(\d+)\)")


def frames(stack: str) -> list[tuple[str, str, int]]:
    """(function, file, line) of each frame of a py-spy dump, innermost first."""
    return [(m.group(1), m.group(2), int(m.group(3)))
            for m in map(FRAME.match, stack.splitlines()) if m]


def where(stack: str, script: str = "faulty_train.py") -> dict | None:
    """The innermost frame, the first frame in `script` and that line's source (None when the
    dump holds no frame of `script`)."""
    fs = frames(stack)
    lab = next((f for f in fs if f[1].endswith(script)), None)
    if lab is None:
        return None
    from dltutor.core.course import lab as lab_path
    lines = lab_path("08_debugging/" + script).read_text().splitlines()
    source = lines[lab[2] - 1].split("#")[0].strip() if lab[2] <= len(lines) else "?"
    return {"innermost": f"{fs[0][0]} ({Path(fs[0][1]).name}:{fs[0][2]})",
            "lab": f"{Path(lab[1]).name}:{lab[2]}", "source": source}


def until_lab(stack: str, script: str = "faulty_train.py") -> str:
    """A py-spy dump cut after its first frame in `script` (the whole dump when it has none)."""
    out = []
    for line in stack.splitlines():
        out.append(line)
        m = FRAME.match(line)
        if m and m.group(2).endswith(script):
            break
    return "\n".join(out)


class StackWatch(threading.Thread):
    """Dump every rank of the run logging into `log_dir` once, `delay` s after its fault."""

    def __init__(self, log_dir, nproc: int, delay: float = 1.5, give_up: float = 60.0):
        super().__init__(daemon=True)
        self.log_dir, self.nproc, self.delay, self.give_up = Path(log_dir), nproc, delay, give_up
        self.dumps: dict[int, str] = {}
        self.taken_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        end = time.monotonic() + self.give_up
        while time.monotonic() < end and not self.stop.is_set():
            events = {r: _events(self.log_dir / f"rank{r}.log") for r in range(self.nproc)}
            pids = {r: e["pid"] for r, evs in events.items() for e in evs
                    if e.get("event") == "start"}
            struck = any(e.get("event") == "fault" for evs in events.values() for e in evs)
            if struck and len(pids) == self.nproc:
                if self.stop.wait(self.delay):
                    return
                self.taken_at = time.time()
                self.dumps = {r: dump(pid) for r, pid in sorted(pids.items())}
                return
            self.stop.wait(0.2)
