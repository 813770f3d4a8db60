"""Named wrong solutions for the exercise tests (tests/test_exercises*.py).

    broken(solution, dest, *edits)     the course's solution with (old, new) edits: a named mistake
    cell_starting(notebook, head)      the one code cell of a course notebook that starts with `head`
    verdict(capsys, ok, status)        a check's printed verdict, once, agreeing with its return value
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from dltutor.core import course

NOTEBOOKS = Path(__file__).resolve().parents[1] / "course" / "notebooks"


def cell_starting(notebook: str, head: str) -> str:
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(head)]
    assert len(cells) == 1, f"{notebook}: expected one cell starting {head!r}, found {len(cells)}"
    return cells[0]


def verdict(capsys, ok: bool, status: str) -> str:
    out = capsys.readouterr().out
    assert ok is (status == "passed"), out
    assert out.count(f"{status}:") == 1, out
    return out


def broken(solution: str, dest: Path, *edits: tuple[str, str]) -> Path:
    """A copy of the course's solution `solution` (under course/labs) with `edits` (old, new)
    applied; each must apply, so a test never silently checks the unbroken solution."""
    text = course.lab(solution).read_text()
    for old, new in edits:
        assert old in text, f"{solution} no longer contains {old!r}: update this test"
        text = text.replace(old, new)
    dest.write_text(text)
    return dest
