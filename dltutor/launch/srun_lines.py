"""srun's labelled output (`srun --label`): which task wrote a line, and over-long lines made whole.

srun --label prefixes every line with the task that wrote it (`0: ...`, ` 3: ...` when there are
ten or more tasks) and cuts a line longer than SRUN_PIECE bytes into pieces, each with the label: a
`DLTUTOR_METRICS {json}` line of a long run arrives as several lines that are not JSON on their
own. `Rejoiner` (streaming) and `rejoin` (a whole output) put them together again.
"""
from __future__ import annotations

import re

LABEL = re.compile(r"^\s*(\d+): ?(.*)$", re.S)
SRUN_PIECE = 1024   # bytes: srun --label cuts a longer output line into pieces, each labelled


class Rejoiner:
    """Puts the over-long lines of a labelled srun output together again: srun --label cuts a line
    of more than SRUN_PIECE bytes into pieces, each with the task's label (`0: ...`), so a piece of
    exactly SRUN_PIECE bytes goes on in the same task's next piece. `feed(line)` returns the whole
    line, or None while it holds a piece."""

    def __init__(self):
        self.held: dict[int, str] = {}

    def feed(self, line: str) -> str | None:
        m = LABEL.match(line)
        if not m:
            return line
        task, piece = int(m.group(1)), line.split(": ", 1)[1] if ": " in line else m.group(2)
        whole = self.held.pop(task, "") + piece
        if len(piece.encode()) == SRUN_PIECE:
            self.held[task] = whole
            return None
        return f"{task}: {whole}"

    def rest(self) -> list[str]:
        """Pieces still held at the end of the output (a task cut off mid-line)."""
        rest, self.held = [f"{t}: {p}" for t, p in self.held.items()], {}
        return rest


def rejoin(text: str) -> list[str]:
    """The lines of a labelled srun output, over-long ones whole again (see Rejoiner)."""
    joiner = Rejoiner()
    lines = [whole for line in text.splitlines() if (whole := joiner.feed(line)) is not None]
    return lines + joiner.rest()
