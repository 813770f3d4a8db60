"""Every check a student runs, kept: how many tries an exercise took and when it was first solved.

    tally("05-reduce-scatter", "wrong")   # append this try; returns the exercise's history so far
    # {"attempts": 3, "first_solved": None, "time": "2026-11-27T05:10:03Z"}

A verdict's record (`dltutor.grading.verdict`) carries this tally, so a notebook saved after any
check holds the whole history of that exercise, not only its last verdict: re-running a check
cell replaces the cell's output, never the count. An attempt is a check that ran the student's
work (solved or wrong); "not yet" (nothing written) is kept in the file but not counted.

The history is one JSON line per check in the student's own data folder: `DLTUTOR_ATTEMPTS`, else
`$XDG_DATA_HOME/dltutor/attempts.jsonl` (default `~/.local/share/...`): in the student's home,
never in the course install a class shares. A history that cannot be read or written (a full
or read-only home) leaves the tally empty and the verdict still shown.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV = "DLTUTOR_ATTEMPTS"
COUNTED = ("solved", "wrong")


def history_file() -> Path:
    path = os.environ.get(ENV)
    if path:
        return Path(path)
    data = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data) / "dltutor" / "attempts.jsonl"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def history(exercise: str, path: Path | None = None) -> list[dict]:
    """The recorded checks of `exercise`, oldest first (unreadable lines are passed over)."""
    path = path or history_file()
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("exercise") == exercise:
            out.append(rec)
    return out


def summary(records: list[dict]) -> dict:
    """{"attempts": solved + wrong checks, "first_solved": time of the first solved or None}."""
    counted = [r for r in records if r.get("status") in COUNTED]
    first = next((r.get("time") for r in counted if r.get("status") == "solved"), None)
    return {"attempts": len(counted), "first_solved": first}


def tally(exercise: str, status: str) -> dict:
    """Append this check to the history; the exercise's summary with it, and its time."""
    path, stamp = history_file(), now()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:   # one short line: an atomic append
            f.write(json.dumps({"exercise": exercise, "status": status, "time": stamp}) + "\n")
    except OSError:
        return {"time": stamp}
    return {**summary(history(exercise, path)), "time": stamp}
