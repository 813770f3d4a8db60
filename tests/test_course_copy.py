"""dltutor.core.course: a notebook opened from a student's copy of the course (the nbgitpuller
hand-out) launches that copy's labs, with the student's edits, even though the kernel's
DLTUTOR_COURSE names the installed course; the launch says which copy its lab comes from, and its
ranks see the same copy (issue 44).

Two course folders are made here: an "installed" one (DLTUTOR_COURSE, as kernel.json sets it) and
a student's copy in a home folder, each with its own version of one lab.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dltutor.core import course
from dltutor.launch import run as L

LAB = "99_probe/probe.py"
PROBE = """\
import json, os, sys
from dltutor.core import course, dist
info = dist.detect()
print(json.dumps({{"who": {who!r}, "rank": info["rank"], "file": os.path.realpath(__file__),
                  "course": str(course.course_root()), "env": os.environ.get("DLTUTOR_COURSE")}}),
      flush=True)
"""


def make_course(root: Path, who: str) -> Path:
    (root / "notebooks").mkdir(parents=True)
    (root / "labs" / Path(LAB).parent).mkdir(parents=True)
    (root / "labs" / LAB).write_text(PROBE.format(who=who))
    return root.resolve()


@pytest.fixture
def courses(tmp_path, monkeypatch):
    installed = make_course(tmp_path / "site" / "dltutor" / "course", "installed")
    copy = make_course(tmp_path / "home" / "ann" / "dltutor" / "course", "the student's edit")
    monkeypatch.setenv(course.COURSE_ENV, str(installed))      # what kernel.json sets
    return installed, copy


def test_a_notebook_in_the_students_copy_uses_that_copy(courses, monkeypatch):
    installed, copy = courses
    monkeypatch.chdir(copy / "notebooks")       # a kernel runs in its notebook's folder
    assert course.opened_copy() == copy
    assert course.course_root() == copy
    assert course.lab(LAB) == copy / "labs" / LAB
    assert course.lab_origin(course.lab(LAB)) == f"lab {LAB} from your copy {copy}"
    assert course.installed_course() == installed
    origin = course.lab_origin(installed / "labs" / LAB)
    assert origin == f"lab {LAB} from the installed course {installed}"
    (copy / "notebooks" / "sub").mkdir()         # a notebook in a folder below notebooks/
    monkeypatch.chdir(copy / "notebooks" / "sub")
    assert course.course_root() == copy


def test_elsewhere_the_installed_course_is_used(courses, monkeypatch, tmp_path):
    installed, copy = courses
    monkeypatch.chdir(tmp_path)                   # a shell, a batch job: not a notebooks/ folder
    assert course.opened_copy() is None and course.course_root() == installed
    stray = tmp_path / "home" / "notebooks"       # a notebooks/ folder with no labs/ beside it
    stray.mkdir(parents=True)
    monkeypatch.chdir(stray)
    assert course.course_root() == installed
    monkeypatch.chdir(installed / "notebooks")    # the install's own notebooks: the same course
    assert course.course_root() == installed
    assert course.lab_origin(course.lab(LAB)).startswith(f"lab {LAB} from the installed course")
    assert course.lab_origin(tmp_path / "answer.py") is None    # an exercise answer: no lab


def test_a_lab_missing_from_the_copy_says_how_to_get_it_back(courses, monkeypatch):
    _, copy = courses
    monkeypatch.chdir(copy / "notebooks")
    with pytest.raises(course.CourseNotFound, match="pull the course again"):
        course.lab("02_ddp/train.py")


@pytest.mark.slow
def test_a_launch_from_the_copy_runs_the_copys_lab_and_says_so(courses, monkeypatch, capsys,
                                                                tmp_path):
    installed, copy = courses
    monkeypatch.chdir(copy / "notebooks")
    result = L.launch(course.lab(LAB), nproc=2, backend="local", timeout=120, echo=True,
                      log_dir=tmp_path / "run")
    out = capsys.readouterr().out
    assert out.count(f"[launch] lab {LAB} from your copy {copy}\n") == 1, out
    seen = [json.loads(Path(result.logs[r]).read_text().splitlines()[-1]) for r in (0, 1)]
    for r, rank in enumerate(seen):
        assert rank["rank"] == r and rank["who"] == "the student's edit", rank
        assert rank["file"] == os.path.realpath(copy / "labs" / LAB)
        assert rank["course"] == str(copy) and rank["env"] == str(copy), rank
    monkeypatch.chdir(tmp_path)                   # the same call from elsewhere: the install's
    L.launch(course.lab(LAB), nproc=1, backend="python", timeout=120, echo=False,
             log_dir=tmp_path / "run2")
    assert capsys.readouterr().out == f"[launch] lab {LAB} from the installed course {installed}\n"


def test_a_quiet_lab_launch_still_says_the_warm_start_began_and_a_check_does_not(courses,
                                                                                  monkeypatch,
                                                                                  capsys, tmp_path):
    """echo=False (most notebook cells) shows a lab's notes, the warm start's server included;
    an exercise check's run of a script outside any labs/ stays silent."""
    from dltutor.launch import warm
    installed, copy = courses
    monkeypatch.chdir(copy / "notebooks")
    warm.stop()
    L.launch(course.lab(LAB), nproc=2, backend="local", timeout=120, echo=False,
             log_dir=tmp_path / "run")
    out = capsys.readouterr().out
    assert "[warm] warm start: torch imported once in a server of this kernel" in out, out
    answer = tmp_path / "answer.py"
    answer.write_text("print('hello')\n")
    warm.stop()
    L.launch(answer, nproc=1, backend="local", timeout=120, echo=False, log_dir=tmp_path / "run2")
    assert capsys.readouterr().out == "", "a check's quiet launch printed something"
    warm.stop()
