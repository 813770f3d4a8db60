"""Room for a class on one node: the memory of a student who has stopped working, measured.

    .venv/bin/python bench/bench_class_footprint.py
    .venv/bin/python bench/bench_class_footprint.py --node-gib 128 256 512 --margin 0.25
    .venv/bin/python bench/bench_class_footprint.py --imports matplotlib.pyplot dltutor.ddp.plots

The "student" is a real Jupyter kernel (jupyter_client, ipykernel) that ran one launch cell:
`import torch, dltutor` and `launch(bench/launch_job.py, nproc=2)` (30 DDP steps on gloo; that
launch starts the warm start's server). Then the student stops working. Measured side by side in
one run, from /proc/<pid>/smaps_rollup, for the kernel and its warm server:
  * after the launch, the server still there (it waits for the next launch), and
  * after the server's idle exit (DLTUTOR_WARM_IDLE, set to --idle-minutes here; 10 by default).
PSS: a page shared by k processes counts 1/k in each, so the PSS of all the processes of a node adds
up to what they hold together; it depends on who else maps the same files (torch's libraries: the
run says how many other processes did). USS: the process's private pages, what each further
student adds to a node where torch's code is already mapped. RSS: every page it maps, as if nothing
were shared. Students per node = floor(node memory x (1 - margin) / per-student memory), with RSS
(nothing shared: a floor) and with USS (a node full of students sharing torch's code).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "bench" / "launch_job.py"
GiB, MiB = 1 << 30, 1 << 20
CELL = ("import torch, dltutor{imports}\nfrom dltutor.launch import warm\nfrom dltutor.launch.run import launch\n"
        "r = launch({job!r}, nproc=2, threads=1, echo=False, timeout=600)\n"
        "print('SERVER', warm.server_pid(), r.returncode, torch.__version__, flush=True)\n")


def memory(pid: int | None) -> dict:
    """{'pss', 'uss', 'rss'} of process `pid` in bytes (zeros when it is gone or a zombie)."""
    fields = dict.fromkeys(("Pss", "Rss", "Private_Clean", "Private_Dirty"), 0)
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text() if pid else ""
    except (FileNotFoundError, ProcessLookupError):
        text = ""
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in fields:
            fields[key] = int(rest.split()[0]) * 1024
    return {"pss": fields["Pss"], "rss": fields["Rss"],
            "uss": fields["Private_Clean"] + fields["Private_Dirty"]}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


class Student:
    """A Jupyter kernel that ran the launch cell: its pid and its warm server's."""

    def __init__(self, kernel_name: str, idle_minutes: float):
        from jupyter_client.manager import start_new_kernel
        env = {**os.environ, "DLTUTOR_WARM_IDLE": f"{idle_minutes:g}"}
        self.km, self.kc = start_new_kernel(kernel_name=kernel_name, startup_timeout=180, env=env)
        self.kernel, self.server, self.torch = self.km.provisioner.process.pid, None, "?"

    def run_cell(self, code: str, timeout: float = 600) -> str:
        out = []

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=timeout)
        if reply["content"]["status"] != "ok":
            raise SystemExit(f"the launch cell failed in kernel {self.kernel}:\n{''.join(out)[-3000:]}")
        return "".join(out)

    def launch_once(self, imports=()) -> None:
        cell = CELL.format(job=str(JOB), imports="".join(", " + m for m in imports))
        server, code, self.torch = self.run_cell(cell).split("SERVER")[1].split()
        self.server = int(server)
        if code != "0" or not alive(self.server):
            raise SystemExit(f"launch returned {code}; server {server} alive: {alive(self.server)}")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def snapshot(s: Student) -> dict:
    """The memory of the student's kernel and of its server (zeros once it has gone)."""
    return {"kernel": memory(s.kernel), "server": memory(s.server if alive(s.server) else None)}


def wait_for_idle_exit(s: Student, timeout: float, since: float) -> float:
    """Seconds from `since` until the student's server has gone by itself (the kernel idles)."""
    while alive(s.server):
        if time.monotonic() - since > timeout:
            raise SystemExit(f"a warm server was still there {timeout:.0f} s after its launch")
        time.sleep(0.2)
    return time.monotonic() - since


def torch_sharers(s: Student) -> int:
    """Processes other than the student's that map libtorch_cpu (they take a share of its PSS)."""
    ours = {s.kernel, s.server}
    found = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in ours:
            try:
                found += "libtorch_cpu" in (entry / "maps").read_text()
            except OSError:
                pass
    return found


def machine(student: Student) -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.machine())
    mem = next(int(ln.split()[1]) * 1024 for ln in Path("/proc/meminfo").read_text().splitlines()
               if ln.startswith("MemTotal:"))
    return (f"{platform.node()}: {cpu}, {os.cpu_count()} cores, {mem / GiB:.1f} GiB, Linux "
            f"{platform.release()}; Python {platform.python_version()}, torch {student.torch}; "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--idle-minutes", type=float, default=0.1, help="DLTUTOR_WARM_IDLE for the run")
    p.add_argument("--node-gib", type=float, nargs="+", default=[128, 256])
    p.add_argument("--margin", type=float, default=0.2, help="share of a node kept for the "
                   "system and for the students who are running something")
    p.add_argument("--kernel-name", default="python3")
    p.add_argument("--imports", nargs="*", default=[], metavar="MODULE",
                   help="more modules the cell imports, as a notebook's cells do "
                   "(e.g. matplotlib.pyplot dltutor.ddp.plots)")
    a = p.parse_args()
    if not 0 < a.idle_minutes <= 5 or not 0 <= a.margin < 1 or min(a.node_gib) <= 0:
        p.error("0 < --idle-minutes <= 5, 0 <= --margin < 1, --node-gib > 0")
    student = Student(a.kernel_name, a.idle_minutes)
    try:
        student.launch_once(a.imports)
        launched = time.monotonic()
        phases = {"one launch, server waiting": snapshot(student)}
        sharers = torch_sharers(student)
        waited = wait_for_idle_exit(student, 60 * a.idle_minutes + 120, launched)
        phases["after the server's idle exit"] = snapshot(student)
        report(a, student, phases, waited, sharers)
    finally:
        student.close()


def report(a, student, phases, waited, sharers) -> None:
    print("machine:", machine(student))
    print(f"cell: import torch, dltutor{''.join(', ' + m for m in a.imports)}; "
          f"launch(bench/launch_job.py, nproc=2) in a Jupyter kernel ({a.kernel_name}); "
          f"DLTUTOR_WARM_IDLE={a.idle_minutes:g}: the server went {waited:.1f} s after the launch")
    print(f"other processes mapping libtorch meanwhile: {sharers} (they take a share of its PSS)")
    print(f"\n{'MiB':30s}" + "".join(f"{h:>9s}" for h in (
        "kernel", "server", "student") * 3))
    print(f"{'':30s}" + "".join(f"{h:>27s}" for h in ("PSS", "USS", "RSS")))
    for label, r in phases.items():
        cells = [(r["kernel"][k], r["server"][k], r["kernel"][k] + r["server"][k])
                 for k in ("pss", "uss", "rss")]
        print(f"{label:30s}" + "".join(f"{n / MiB:9.0f}" for trio in cells for n in trio))
    print(f"\nstudents who stopped working per node, {a.margin:.0%} of it kept aside "
          "(nothing shared, RSS / torch's code shared, USS):")
    for gib in a.node_gib:
        usable = gib * GiB * (1 - a.margin)
        cells = []
        for label, r in phases.items():
            rss, uss = (r["kernel"][k] + r["server"][k] for k in ("rss", "uss"))
            cells.append(f"{label}: {math.floor(usable / rss)} / {math.floor(usable / uss)}")
        print(f"  {gib:g} GiB   " + "   ".join(cells))


if __name__ == "__main__":
    main()
