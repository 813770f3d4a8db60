"""Every exercise of the catalog is mutation-tested: at least MIN_WRONG answers its check must
call wrong (each naming its mistake) and MIN_RIGHT right answers written differently from the
course's solution that it must call solved (tests/answers/<id>/, run by each exercise's tests)."""
from __future__ import annotations

import re

import pytest

from dltutor.grading.catalog import EXERCISES
from mutants import MIN_RIGHT, MIN_WRONG, ROOT, answers


@pytest.mark.parametrize("exercise", [e.id for e in EXERCISES])
def test_every_exercise_has_wrong_and_right_answers(exercise):
    wrong, right = answers(exercise, "wrong"), answers(exercise, "solved")
    assert len(wrong) >= MIN_WRONG, f"{exercise}: {len(wrong)} wrong answers in {ROOT / exercise}"
    assert len(right) >= MIN_RIGHT, f"{exercise}: {len(right)} right answers in {ROOT / exercise}"
    for a in wrong:
        re.compile(a.names)
        assert a.why, f"{a.path}: say in '# why:' what the mistake is"


def test_every_answer_file_has_a_header_and_a_known_exercise():
    known = {e.id for e in EXERCISES}
    for folder in ROOT.iterdir():
        if folder.is_dir() and not folder.name.startswith(("_", ".")):
            assert folder.name in known, f"{folder}: no exercise of that id in the catalog"
            for a in answers(folder.name):
                assert a.source().strip(), a.path
