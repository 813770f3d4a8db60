"""What a launch returns or raises, and the rule that says which rank to blame.

When one rank fails, the others usually fail a moment later with "connection reset by peer" or are
stopped by the launcher. `blame_ranks` drops those, so the error names the rank that failed on its
own; `dltutor.launch.run` and `dltutor.launch.slurm` both use it.
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

# What a rank says when it only died because another rank vanished from a collective.
_PEER_LOST = re.compile(r"closed by peer|reset by peer|remote worker|Broken pipe|"
                        r"communicator was aborted|DistNetworkError|timed out|Timeout|"
                        r"Horovod has been shut down", re.I)


def error_lines(log_tail: str) -> str:
    """The exception lines of the last traceback in `log_tail` (its unindented lines after
    "Traceback"), or the whole tail when it holds no traceback. Only these say why a rank died:
    the frames above them may quote source that mentions a timeout or a peer."""
    lines = log_tail.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if not starts:
        return log_tail
    after = [line for line in lines[starts[-1] + 1:] if line and not line[0].isspace()]
    return "\n".join(after) or log_tail


def cause_lines(culprits: list, tail_of, width: int = 300) -> list[str]:
    """The error each blamed rank raised ("rank 1: RuntimeError: ..."), two at most, in the
    order given (`blame_ranks`: the first in time first), before the tails that show where."""
    out = []
    for i, r in enumerate(culprits[:2]):
        tail = tail_of(r)
        cause = error_lines(tail).splitlines()
        if cause:   # a traceback: the exception's own line ("Terminated" may follow); else the last
            line = cause[0] if "Traceback" in tail else cause[-1]
            out.append(f"rank {r}{' (first)' if i == 0 and len(culprits) > 1 else ''}: "
                       f"{line[:width]}")
    return out


def lost_peer(log_tail: str) -> bool:
    """True when a rank's last lines show it failed because a peer went away."""
    return bool(_PEER_LOST.search(error_lines(log_tail)))


def failed_codes(backend, launcher_text: str, tails: dict) -> dict:
    """{rank: exit code or None} of the failed ranks: those the launcher names, and the ranks with
    a traceback where it names none or names only the first process to exit (horovodrun)."""
    named = backend.failures(launcher_text)
    if named and not backend.names_first_only:
        return named
    traced = {r: None for r, tail in tails.items() if any("Traceback" in t for t in tail)}
    return {**traced, **named}


def blame_ranks(codes: dict, tail_of, stopped=(-9, -15), first_error=None) -> list[int]:
    """The ranks to blame among the failed ones ({rank: exit code, -9/-15 killed/terminated}):
    not those that only lost a peer (`tail_of(rank)` = its last lines) nor those the launcher
    stopped after another failed (exit codes in `stopped`: torchrun stops ranks with SIGTERM
    only, so there a SIGKILLed rank, e.g. by the OOM killer, is blamed), unless nothing is left.
    `first_error` ({rank: when its first traceback began}) orders them: the first in time first."""
    when = first_error or {}
    failed = sorted(codes, key=lambda r: (when.get(r, float("inf")), r))
    own = [r for r in failed if not lost_peer(tail_of(r))]
    return [r for r in own if codes[r] not in stopped] or own or failed


TEARDOWN_ABORT = "terminate called without an active exception"


def watchdog_codes(nproc: int, stop_code: int, tails: dict) -> dict:
    """{rank: exit code} when dltutor's watchdog stopped the launcher before it reported any: each
    rank stopped (`stop_code`), except one whose last line is the C++ runtime's TEARDOWN_ABORT,
    which abort() follows (-6, SIGABRT)."""
    return {r: -6 if tails.get(r) and str(list(tails[r])[-1]).strip() == TEARDOWN_ABORT else stop_code
            for r in range(nproc)}


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


def exit_words(code) -> str:
    """A rank's exit code in words: a negative one is the signal that killed it."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"killed by signal {-code}, {name}: exit code {code}"
    return f"exit code {code}"


def followed_words(code, tail, stop_codes) -> str:
    """Why a rank that was not blamed ended, from its exit code and its last lines."""
    if code in stop_codes:
        return "the launcher stopped it after the other failure"
    if lost_peer("\n".join(tail)):
        return "it lost its peer in a collective (its own last lines say so)"
    return "its last lines name no cause"


def failure_message(run, rc: int, log_dir: Path, grace: float) -> str:
    """A failed launch in words: the ranks to blame (`run.blame()`: the first in time first) and
    the ones that only followed, each blamed rank's error, then its last lines (`run.tails`)."""
    culprits, failed = run.blame()
    if not culprits:
        tail = "\n".join(run.launcher_lines[-20:])
        return (f"launch failed: {run.backend.name} exited with code {rc} and named no rank.\n"
                f"Last lines of {log_dir / 'launcher.log'}:\n{tail}")
    named = ", ".join(map(str, culprits))
    codes = failed_codes(run.backend, "\n".join(run.launcher_lines), run.tails)
    how = "; ".join(f"rank {r}: {exit_words(codes.get(r))}" for r in culprits
                    if codes.get(r) is not None)
    lines = [f"rank {named} failed ({how + '; ' if how else ''}launcher exit code {rc})."
             if not run.watchdog else
             f"rank {named} failed; the other ranks did not stop within {grace:.0f} s, so "
             "dltutor killed them."]
    for r in (r for r in failed if r not in culprits):
        lines.append(f"rank {r} stopped too ({exit_words(codes.get(r))}): "
                     f"{followed_words(codes.get(r), run.tails[r], run.backend.stop_codes)}.")
    lines += cause_lines(culprits, lambda r: "\n".join(run.tails[r]))
    for r in culprits[:2]:
        lines.append(f"--- last {len(run.tails[r])} lines of rank {r} ({log_dir / f'rank{r}.log'}):")
        lines.extend(run.tails[r])
    return "\n".join(lines)
