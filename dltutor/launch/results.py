"""What a launch returns or raises, and the rule that says which rank to blame.

When one rank fails, the others usually fail a moment later with "connection reset by peer" or are
stopped by the launcher. `blame_ranks` drops those, so the error names the rank that failed on its
own; `dltutor.launch.run` and `dltutor.launch.slurm` both use it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# What a rank says when it only died because another rank vanished from a collective.
_PEER_LOST = re.compile(r"closed by peer|reset by peer|remote worker|Broken pipe|"
                        r"communicator was aborted|DistNetworkError|timed out|Timeout|"
                        r"Horovod has been shut down", re.I)


def lost_peer(log_tail: str) -> bool:
    """True when a rank's last lines show it failed because a peer went away."""
    return bool(_PEER_LOST.search(log_tail))


def blame_ranks(codes: dict, tail_of, stopped=(-9, -15)) -> list[int]:
    """The ranks to blame among the failed ones ({rank: exit code, -9/-15 killed/terminated}):
    not those that only lost a peer (`tail_of(rank)` = its last lines) nor those the launcher
    stopped after another failed (exit codes in `stopped`: torchrun stops ranks with SIGTERM
    only, so there a SIGKILLed rank, e.g. by the OOM killer, is blamed), unless nothing is left."""
    failed = sorted(codes)
    own = [r for r in failed if not lost_peer(tail_of(r))]
    return [r for r in own if codes[r] not in stopped] or own or failed


TEARDOWN_ABORT = "terminate called without an active exception"


def aborted_after_reporting(codes: dict, tails: dict, metrics: list, backend, log_dir) -> str:
    """A WARNING line when every failed rank ({rank: exit code}) had reported its results and
    then either was aborted by the C++ runtime while exiting (SIGABRT, last line TEARDOWN_ABORT:
    a race in the gloo backend's teardown, seen a few times per CI run on 2 busy cores) or was
    stopped by the launcher (`backend.stop_codes`) after such a peer; else "" (a real failure)."""
    reported = {m.get("rank") for m in metrics}
    aborted = sorted(r for r, code in codes.items() if code == -6 and tails.get(r)
                     and str(list(tails[r])[-1]).strip() == TEARDOWN_ABORT)
    if not aborted or not all(r in reported and (r in aborted or code in backend.stop_codes)
                              for r, code in codes.items()):
        return ""
    return (f"[{backend.name}] WARNING: rank {', '.join(map(str, sorted(codes)))} had reported its "
            f"results; then rank {', '.join(map(str, aborted))} was aborted while exiting "
            f"('{TEARDOWN_ABORT}', a gloo teardown race). The results are complete and kept; "
            f"logs in {log_dir}")


class LaunchError(RuntimeError):
    """A launch failed; `ranks` are the ranks to blame (first = most likely root cause)."""

    def __init__(self, message, ranks=(), result=None):
        super().__init__(message)
        self.ranks = list(ranks)
        self.result = result


class LaunchTimeout(LaunchError):
    """The overall timeout passed; `ranks` are the ranks that were still running."""


@dataclass
class LaunchResult:
    returncode: int
    wall_time: float
    metrics: list = field(default_factory=list)
    logs: dict = field(default_factory=dict)   # rank -> Path of its log (stdout + stderr)
    command: list = field(default_factory=list)
    log_dir: Path | None = None
    backend: str = "local"

    def metric(self, name):
        """One metric from every rank that reported it, in rank order."""
        return [m[name] for m in self.metrics if name in m]
