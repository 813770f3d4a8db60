"""What a launch says while its ranks are silent: which ranks still run, what each printed last,
and when the wait gives up.

A cell that launches ranks (a lab, an exercise check) would otherwise show nothing while a rank
waits in a collective that never completes (a `recv` whose `send` was never made), until the
process group's or the launch's timeout. `dltutor.launch.run` keeps one `Waiting` per launch:
every line a rank prints goes to `heard`; once no rank has printed for QUIET seconds, `due`
is true and `notice` gives one line such as

    [waiting] 10 s without a line from the ranks. Still running: rank 1 (last printed: 'step 3:
    recv from rank 0'). Ended: rank 0. The launch gives up at 09:14:05 (timeout 120 s); a
    collective fails after 30 s (DLTUTOR_DIST_TIMEOUT).

The next notice comes after twice the gap (10, 30, 70, 150 s of silence, ... at most LONGEST
apart), and any line from a rank starts the count over. A quick launch prints none.
"""
from __future__ import annotations

import time

from dltutor.core.dist import TIMEOUT_ENV, read_report

QUIET = 10.0      # s without a line from any rank before the first notice
LONGEST = 300.0   # s: the longest gap between two notices
WIDTH = 80        # characters of a rank's last line quoted in a notice


class Waiting:
    """The silence of one launch: when it began, the next notice, each rank's last line."""

    def __init__(self, deadline: float, timeout: float, env: dict, nproc: int):
        self.deadline, self.timeout, self.nproc = deadline, timeout, nproc
        self.dist_timeout = env.get(TIMEOUT_ENV)
        self.last: dict[int, str] = {}      # rank -> its last line, as the notice quotes it
        self.launcher_last = ""
        self.start_over(time.monotonic())

    def start_over(self, now: float) -> None:
        self.silent_since, self.gap, self.next_at = now, QUIET, QUIET

    def heard(self, rank: int, text: str, now: float) -> None:
        """A line from `rank`: the silence ends."""
        self.last[rank] = quoted(text)
        self.start_over(now)

    def heard_launcher(self, text: str) -> None:
        """A line from the launcher (a Slurm job pending, ...): quoted when no rank runs here."""
        self.launcher_last = quoted(text)

    def due(self, now: float) -> bool:
        return now - self.silent_since >= self.next_at

    def notice(self, now: float, running: list[int]) -> str:
        """The line to print now (`running`: the ranks whose processes still run here); moves
        the next notice twice as far."""
        silent = now - self.silent_since
        self.gap = min(2 * self.gap, LONGEST)
        self.next_at = silent + self.gap
        return (f"[waiting] {silent:.0f} s without a line from the ranks. "
                f"{self.ranks_part(running)} {self.until_part(now)}")

    def ranks_part(self, running: list[int]) -> str:
        if not running:
            launcher = f" (its last line: {self.launcher_last!r})" if self.launcher_last else ""
            return (f"No rank process runs on this node (none started yet, or they run on other "
                    f"nodes); the launcher still runs{launcher}.")
        said = [f"rank {r} (" + (f"last printed: {self.last[r]!r}" if r in self.last
                                 else "printed nothing yet") + ")" for r in running]
        ended = [str(r) for r in range(self.nproc) if r not in running]
        return (f"Still running: {', '.join(said)}."
                + (f" Ended: rank {', '.join(ended)}." if ended else ""))

    def until_part(self, now: float) -> str:
        gives_up = time.strftime("%H:%M:%S", time.localtime(time.time() + self.deadline - now))
        collective = (f"; a collective fails after {self.dist_timeout} s ({TIMEOUT_ENV})"
                      if self.dist_timeout else "")
        return f"The launch gives up at {gives_up} (timeout {self.timeout:.0f} s){collective}."


def quoted(text: str) -> str:
    """A rank's line as a notice quotes it: a metrics record by its event, long lines cut."""
    record = read_report(text)
    if record is not None:
        text = f"reported {record.get('event', 'its metrics')}"
    text = " ".join(text.split())
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + "..."
