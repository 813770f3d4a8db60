"""Named wrong solutions for the exercise tests (tests/test_exercises*.py).

    broken(solution, dest, *edits)     the course's solution with (old, new) edits: a named mistake
"""
from __future__ import annotations

from pathlib import Path

from dltutor.core import course


def broken(solution: str, dest: Path, *edits: tuple[str, str]) -> Path:
    """A copy of the course's solution `solution` (under course/labs) with `edits` (old, new)
    applied; each must apply, so a test never silently checks the unbroken solution."""
    text = course.lab(solution).read_text()
    for old, new in edits:
        assert old in text, f"{solution} no longer contains {old!r}: update this test"
        text = text.replace(old, new)
    dest.write_text(text)
    return dest
