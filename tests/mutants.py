"""The answers every exercise check is mutation-tested with: tests/answers/<exercise id>/*.py.

Each file is one student's answer (a script, or the cell's code that defines the student's
function), written as a student would, with a header that says what the check must decide:

    # expect: wrong                      (or: solved)
    # names: set_epoch|same order        a regex the verdict's message must match (wrong only)
    # why: the sampler is never told the epoch, so every epoch reads the same order

A `.py` file is the answer as it stands. A `.patch` file is the course's solution with edits, so
a one-line mistake is not a copy of the whole solution: its header adds `# from: <path under
course/labs>` and its body holds blocks that replace the first text with the second (each must
be found, so an answer never silently stays the unbroken solution):

    <<<<<<<
        sampler.set_epoch(epoch)
    =======
        pass
    >>>>>>>

    a.source()                     the answer's text (the edits applied)
    a.write(tmp_path / "x.py")     written where the check reads it; returns the path

    answers("02-ddp")              every answer of that exercise, sorted by file name
    answers("02-ddp", "wrong")     only those the check must call wrong

`tests/test_mutation_coverage.py` holds every exercise of the catalog to at least MIN_WRONG wrong
and MIN_RIGHT right answers; each exercise's own test file runs them through its check.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent / "answers"
MIN_WRONG, MIN_RIGHT = 5, 2
_HEADER = re.compile(r"^#\s*(expect|names|why|from):\s*(.*?)\s*$")
_EDIT = re.compile(r"^<<<<<<<[^\n]*\n(.*?)^=======[^\n]*\n(.*?)^>>>>>>>[^\n]*$", re.M | re.S)


@dataclass(frozen=True)
class Answer:
    path: Path
    expect: str            # "wrong" or "solved"
    names: str             # regex the message must match ("" for solved)
    why: str
    base: str = ""         # the solution a .patch answer edits (a path under course/labs)

    @property
    def name(self) -> str:
        return self.path.stem

    def source(self) -> str:
        """The student's text: the file itself, or the solution with the file's edits applied."""
        if self.path.suffix != ".patch":
            return self.path.read_text()
        from dltutor.core import course
        text = course.lab(self.base).read_text()
        edits = _EDIT.findall(self.path.read_text())
        assert edits, f"{self.path}: a .patch answer holds <<<<<<< old ======= new >>>>>>> blocks"
        for old, new in edits:
            assert old in text, f"{self.path}: {self.base} no longer contains {old!r}"
            text = text.replace(old, new, 1)
        return text

    def write(self, dest: Path) -> Path:
        dest = Path(dest)
        dest.write_text(self.source())
        return dest

    def __str__(self) -> str:           # pytest ids
        return self.name

    def assert_named(self, message: str) -> None:
        """The verdict's message names this answer's mistake."""
        assert re.search(self.names, message, re.I | re.S), (
            f"{self.path.name}: the message does not name the mistake ({self.why});"
            f" expected /{self.names}/ in:\n{message}")


def parse(path: Path) -> Answer:
    head = {}
    for line in path.read_text().splitlines():
        m = _HEADER.match(line)
        if not m:
            break
        head[m.group(1)] = m.group(2)
    expect = head.get("expect")
    assert expect in ("wrong", "solved"), f"{path}: header '# expect: wrong|solved' missing"
    if expect == "wrong":
        assert head.get("names"), f"{path}: a wrong answer needs '# names: <regex>'"
    if path.suffix == ".patch":
        assert head.get("from"), f"{path}: a .patch answer needs '# from: <solution under course/labs>'"
    return Answer(path, expect, head.get("names", ""), head.get("why", ""), head.get("from", ""))


def answers(exercise: str, expect: str | None = None) -> list[Answer]:
    folder = ROOT / exercise
    files = sorted([*folder.glob("*.py"), *folder.glob("*.patch")]) if folder.is_dir() else []
    found = [parse(p) for p in files]
    return [a for a in found if expect is None or a.expect == expect]
