"""The machine's load around a timed run: the 1-minute load average (/proc/loadavg) before and
after, beside the core count, so a table of times says how busy the cores were while it ran.

    before = load1(); ...run...; after = load1()
    load_sentence("TP runs, 2 ranks", before, after, cores=2)
"""
from __future__ import annotations

import math
from pathlib import Path

LOADAVG = Path("/proc/loadavg")


def load1(path=LOADAVG) -> float:
    """The 1-minute load average (runnable + waiting threads, averaged); nan where not readable."""
    try:
        return float(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return math.nan


def load_sentence(name: str, before: float, after: float, cores: int) -> str:
    """What the load was around `name`, and whether it exceeded the cores (other work then shared
    them, and the times are contended)."""
    if math.isnan(before) or math.isnan(after):
        return f"{name}: the load average could not be read here (no /proc/loadavg): load not known."
    head = f"{name}: 1-minute load average {before:.2f} before, {after:.2f} after, on {cores} core(s)"
    if max(before, after) > cores:
        return (f"{head}: ABOVE the cores, so other work shared them while this ran; its times are "
                "contended and say how this machine did at that moment, not what the method costs.")
    return f"{head}: not above the cores."
