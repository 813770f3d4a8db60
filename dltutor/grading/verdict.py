"""The outcome of one exercise check, the same for every exercise of the course.

A check ends with a `Verdict`: `solved`, `not yet` (nothing of the exercise written: the skeleton
as handed out, a missing file, a TODO still raising NotImplementedError) or `wrong` (the student's
code ran and something differs; the message says which rank, which tensor, by how much).

`Verdict.show()` prints it for the student ("passed: ...", "not yet: ...", "wrong: ..."), adds the
check to the student's history (`dltutor.grading.attempts`: tries so far, first solved time) and,
in a Jupyter kernel, also displays a one-line badge whose output metadata carries the record
(`RECORD_KEY`: exercise id, status, message, attempts, first_solved, time). That metadata is saved
in the notebook with its outputs, so the instructor's report (`dltutor.grading.report`) reads it
from the executed notebook. A check of the course's own reference solution is shown with
`reference=True`: never counted, never added to the history.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

SOLVED, NOT_YET, WRONG = "solved", "not yet", "wrong"
STATUSES = (SOLVED, NOT_YET, WRONG)
RECORD_KEY = "dltutor_exercise"        # the output metadata key the report reads
_PREFIX = {SOLVED: "passed:", NOT_YET: "not yet:", WRONG: "wrong:"}
_BADGE = {SOLVED: ("#1a7f37", "solved"), NOT_YET: ("#9a6700", "not yet"), WRONG: ("#cf222e", "wrong")}


@dataclass
class Verdict:
    exercise: str                 # the catalog id, e.g. "04-zero1"
    status: str                   # SOLVED, NOT_YET or WRONG
    lines: list[str] = field(default_factory=list)   # the evidence (solved) or what differs
    reference: bool = False       # the course's own solution: shown, never counted
    tally: dict = field(default_factory=dict)        # attempts, first_solved, time (from show())

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, not {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status == SOLVED

    @property
    def message(self) -> str:
        return "; ".join(line.strip() for line in self.lines)

    def text(self) -> str:
        head = _PREFIX[self.status]
        if self.status == SOLVED or len(self.lines) == 1:
            return f"{head} {self.message}".rstrip()
        return "\n".join([head, *(f"  - {line}" for line in self.lines)])

    def record(self) -> dict:
        return {"exercise": self.exercise, "status": self.status, "message": self.message,
                "reference": self.reference, **self.tally}

    def show(self) -> bool:
        """Print the verdict, add it to the student's history (not a reference check's) and, in
        Jupyter, record it in the cell's output; return `ok`."""
        if not self.reference:
            from dltutor.grading import attempts
            self.tally = attempts.tally(self.exercise, self.status)
        print(self.text())
        _display_record(self)
        return self.ok


def solved(exercise: str, *evidence: str, reference: bool = False) -> Verdict:
    return Verdict(exercise, SOLVED, list(evidence), reference)


def not_yet(exercise: str, *what: str, reference: bool = False) -> Verdict:
    return Verdict(exercise, NOT_YET, list(what), reference)


def wrong(exercise: str, *what: str, reference: bool = False) -> Verdict:
    return Verdict(exercise, WRONG, list(what), reference)


def from_problems(exercise: str, problems: list[str], summary: str, started: bool = True,
                  reference: bool = False) -> Verdict:
    """The usual ending: no problems -> solved with `summary`; else wrong (or not yet when the
    student has not `started`: nothing of the exercise written yet)."""
    if not problems:
        return solved(exercise, summary, reference=reference)
    return Verdict(exercise, WRONG if started else NOT_YET, list(problems), reference)


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _display_record(v: Verdict) -> None:
    if not _in_kernel():
        return
    from IPython.display import HTML, display
    colour, word = _BADGE[v.status]
    who = "reference solution" if v.reference else "your code"
    badge = (f'<span style="background:{colour};color:white;padding:1px 6px;border-radius:3px">'
             f'{html.escape(v.exercise)}: {word}</span> <small>({who})</small>')
    display(HTML(badge), metadata={RECORD_KEY: v.record()})
