"""One `make gpu-check` in several streams, and its GPU measurements, written as ONE record.

    python scripts/gpu_check.py --streams 3 --measure ladder --deadline 420

`--measure` runs the named bench/ measurements first, each alone on the GPU (their timings mean
something only then); `--streams N` then splits every lab and notebook over N child checks
(`gpu_check.py --only '^(...)$' --out <tmp> --no-readme`) that run side by side, the longest
first (minutes from the newest record in docs/verified, 1 for one it lacks), and merges their rows
into the parent's record. `--deadline` is seconds from the start of the check: a lab or notebook
not started by then is "not run: the check's deadline passed", and a child still running then gets
its own rows' worth of time to finish (the parent waits until the deadline plus one job's timeout).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MEASUREMENTS = {   # name: the bench/ command (its --json file is added by measure())
    "ladder": ["bench/bench_time_to_accuracy.py", "--ladder", "--cap-s", "60"],
}


def past_minutes(folder: Path = ROOT / "docs" / "verified") -> dict:
    """name -> minutes in the newest record that ran it (the stream planner's weights)."""
    out = {}
    for path in sorted(folder.glob("*.json")):           # oldest first: newer ones overwrite
        try:
            rows = json.loads(path.read_text()).get("results", [])
        except (OSError, ValueError):
            continue
        out.update({r["name"]: r.get("minutes") or 0.0 for r in rows if r.get("status") == "pass"})
    return out


def plan_streams(names: list[str], n: int, minutes: dict) -> list[list[str]]:
    """Longest first, each to the stream with the least planned so far; empty streams dropped."""
    streams = [[] for _ in range(max(1, n))]
    load = [0.0] * len(streams)
    for name in sorted(names, key=lambda k: -minutes.get(k, 1.0)):
        i = load.index(min(load))
        streams[i].append(name)
        load[i] += minutes.get(name, 1.0)
    return [s for s in streams if s]


def only_regex(names: list[str]) -> str:
    return "^(?:" + "|".join(re.escape(n) for n in names) + ")$"


def child_command(names, out_dir: Path, deadline_s: float, timeout: float, extra=()) -> list[str]:
    return [sys.executable, str(HERE / "gpu_check.py"), "--only", only_regex(names), "--out",
            str(out_dir), "--no-readme", "--deadline", f"{max(0.0, deadline_s):.0f}",
            "--timeout", f"{timeout:.0f}", *extra]


def run_children(commands: list[list[str]], wait_s: float, log_dir: Path) -> list[int | None]:
    """Start every command in its own process group, logs to log_dir/stream-K.log; wait at most
    `wait_s` for all; a child still running then is stopped with its whole group (None)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for k, cmd in enumerate(commands):
        log = open(log_dir / f"stream-{k}.log", "w")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, cwd=str(ROOT)))
        print(f"  stream {k}: pid {procs[-1].pid}, log {log_dir / f'stream-{k}.log'}", flush=True)
    end, codes = time.monotonic() + wait_s, []
    for p in procs:
        try:
            codes.append(p.wait(timeout=max(0.0, end - time.monotonic())))
        except subprocess.TimeoutExpired:
            stop_group(p)
            codes.append(None)
    return codes


def stop_group(proc, grace: float = 10.0) -> None:
    """SIGTERM the child's process group, SIGKILL what is left after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def stream_results(names_per_stream, out_dirs, codes, result_cls, load) -> list:
    """Every child's rows; a child that wrote no record: each of its names 'fail' (stopped or
    crashed), so nothing planned goes missing from the record."""
    rows = []
    for names, out, code in zip(names_per_stream, out_dirs, codes):
        records = sorted(Path(out).glob("*.json"))
        got = {r.name: r for path in records for r in load(path)[1]}
        for name in names:
            if name in got:
                rows.append(got[name])
            else:
                kind = "notebook" if "/" not in name else "lab"
                rows.append(result_cls(name, kind, "not run: unfinished when its stream was "
                                       "stopped at the check's deadline") if code is None else
                            result_cls(name, kind, "fail",
                                       detail=f"its stream exited {code} before this row"))
    return rows


def cpu_list(text: str | None) -> set[int] | None:
    """'0-3,8' -> {0, 1, 2, 3, 8}; None stays None."""
    if not text:
        return None
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for_pid(pid: int, deadline: float | None, poll: float = 2.0) -> bool:
    """Wait until process `pid` has ended (True), or the deadline passed (False)."""
    print(f"  waiting for process {pid} before the labs and notebooks", flush=True)
    while alive(pid):
        if deadline is not None and time.monotonic() > deadline:
            print(f"  process {pid} still runs at the deadline: going on", flush=True)
            return False
        time.sleep(poll)
    return True


def measure(names: list[str], log_root: Path, timeout: float, python: str = sys.executable,
            cpus: set[int] | None = None):
    """(measurements, rows): each bench/ measurement run alone, its --json dict; a measurement
    that fails or writes nothing is a 'fail' row with its log's last line."""
    from gpu_record import Result
    found, rows = [], []
    for name in names:
        if name not in MEASUREMENTS:
            raise SystemExit(f"gpu-check: no measurement {name!r}; known: {', '.join(MEASUREMENTS)}")
        out, log = log_root / f"measure-{name}.json", log_root / f"measure-{name}.log"
        cmd = [python, str(ROOT / MEASUREMENTS[name][0]), *MEASUREMENTS[name][1:], "--json", str(out)]
        print(f"  measurement {name}: {' '.join(cmd[1:])} (log {log})", flush=True)
        started = time.monotonic()
        with open(log, "w") as fh:
            try:
                code = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=str(ROOT),
                                      timeout=timeout, preexec_fn=cpus and (
                                          lambda: os.sched_setaffinity(0, cpus))).returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
        minutes = (time.monotonic() - started) / 60
        if out.exists():                # a stopped ladder has written the rungs it finished
            found.append(json.loads(out.read_text()))
        tail = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1][:300]
        status = "pass" if out.exists() and code in (0, 1) else "fail"
        if code == "timeout":
            tail = f"stopped after {timeout:.0f} s; " + ("its --json holds the parts it finished"
                                                          if out.exists() else "nothing written")
        rows.append(Result(f"measure {name}", "measurement", status, minutes,
                           detail=f"exit {code}: {tail}" if status == "fail" else
                           f"{' '.join(MEASUREMENTS[name])} (alone on the GPU)"))
    return found, rows
