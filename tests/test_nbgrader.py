"""The course's exercises as an nbgrader assignment, and nbgrader's round trip on it, for real.

The round trip runs nbgrader 0.9.6's own CLI on one machine with an exchange in a temporary
folder: generate and release notebook 06's assignment, two students fetch it into homes of their
own, one writes wrong answers and one the course's solutions, both submit, the instructor collects
and autogrades (nbgrader runs each notebook on the `dltutor` kernel it names, in fast mode), and
the gradebook's scores must agree with `python -m dltutor report` on every exercise.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from dltutor import cli
from dltutor.grading import catalog, report
from dltutor.grading import nbgrader as G
from dltutor.grading import nbgrader_steps as S

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "course"
ANSWERS = ROOT / "tests" / "answers"
SOLUTIONS = COURSE / "labs" / "06_model_parallel" / "solutions"
NOTEBOOK = "06_model_parallelism.ipynb"
ASSIGNMENT = "06_model_parallelism"
# alice: a real mistake in two exercises, the pipeline as handed out; bob: the course's solutions
ALICE = {"06-tensor-parallel": ANSWERS / "06-tensor-parallel" / "wrong_all_gather.py",
         "06-placement": ANSWERS / "06-placement" / "wrong_tp_slowest.py"}
BOB = {"06-tensor-parallel": SOLUTIONS / "tp_mlp.py", "06-pipeline": SOLUTIONS / "gpipe_forward.py",
       "06-placement": SOLUTIONS / "place.py"}
EXPECTED = {"alice": {"06-tensor-parallel": "wrong", "06-pipeline": "not yet", "06-placement": "wrong"},
            "bob": {"06-tensor-parallel": "solved", "06-pipeline": "solved", "06-placement": "solved"}}


def _nbgrader_cells(path: Path) -> dict[str, tuple[dict, str]]:
    nb = nbformat.read(str(path), as_version=4)
    return {c.id: (c.metadata["nbgrader"], c.source) for c in nb.cells if "nbgrader" in c.metadata}


def test_every_exercise_is_a_test_or_says_why_not():
    ids = {e.id for e in catalog.EXERCISES}
    assert set(G.GRADED) | set(G.NOT_AUTOGRADED) == ids
    assert not set(G.GRADED) & set(G.NOT_AUTOGRADED)


def test_source_marks_answer_and_check_cells_and_nothing_else(tmp_path):
    course = G.make_course(tmp_path / "grading", COURSE, exchange=tmp_path / "ex", points=3)
    assert course.assignments == [Path(n).stem for n in G.graded_notebooks()]
    assert sorted(i for ids in course.exercises.values() for i in ids) == sorted(G.GRADED)
    config = (tmp_path / "grading" / "nbgrader_config.py").read_text()
    assert f"c.Exchange.root = {str((tmp_path / 'ex').resolve())!r}" in config
    assert "c.ClearSolutions.code_stub = {'python': ''}" in config
    for ex_id, g in G.GRADED.items():
        name = catalog.get(ex_id).notebook
        original = nbformat.read(str(COURSE / "notebooks" / name), as_version=4)
        marked = G.assignment_name(name)
        cells = _nbgrader_cells(tmp_path / "grading" / "source" / marked / name)
        answer_meta, answer = cells[g.answer]
        assert answer_meta == {"grade_id": f"{ex_id}-answer", "solution": True, "grade": False,
                               "locked": False, "schema_version": 3}
        skeleton = next(c.source for c in original.cells if c.id == g.answer)
        assert answer == skeleton.rstrip("\n") + "\n" + G.SOLUTION_REGION
        test_meta, test = cells[g.check]
        assert test_meta == {"grade_id": ex_id, "solution": False, "grade": True, "locked": True,
                             "points": 3, "schema_version": 3}
        assert f"must_pass({ex_id!r}, {g.call})" in test
    for name in G.graded_notebooks():    # every other cell as the course has it, ids kept
        original = nbformat.read(str(COURSE / "notebooks" / name), as_version=4)
        made = nbformat.read(str(tmp_path / "grading/source" / G.assignment_name(name) / name), 4)
        marked = {c for g in G.GRADED.values() for c in (g.answer, g.check)}
        assert [c.id for c in made.cells] == [c.id for c in original.cells]
        assert [c.source for c in made.cells if c.id not in marked] == \
               [c.source for c in original.cells if c.id not in marked]


def test_must_pass_fails_unless_the_check_passed():
    assert G.must_pass("06-placement", True) is True
    for ok in (False, None, 1):
        with pytest.raises(AssertionError, match="06-placement"):
            G.must_pass("06-placement", ok)


def test_bad_input_is_one_clear_error(tmp_path, capsys):
    assert cli.main(["nbgrader-course", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "has no notebooks/ folder" in capsys.readouterr().err
    assert cli.main(["nbgrader-course", str(COURSE), str(tmp_path / "out"), "--notebooks", "11"]) == 2
    assert "no notebook with exercises starts with 11" in capsys.readouterr().err
    with pytest.raises(G.AssignmentError, match="does not call"):
        G.autograder_source("06-placement", "exercise_place.check(solution=True)",
                            "exercise_place.check(place)")


def _answer(path: Path, answers: dict[str, Path]) -> None:
    """Write the answers into the student's fetched notebook, as a student would in Jupyter."""
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        ex_id = cell.metadata.get("nbgrader", {}).get("grade_id", "").removesuffix("-answer")
        if ex_id in answers and not cell.metadata["nbgrader"]["grade"]:
            first = cell.source.splitlines()[0]
            text = answers[ex_id].read_text()
            cell.source = f"{first}\n{text}" if first.startswith("%%writefile") else text
    nbformat.write(nb, str(path))


def _student(name: str, answers, base: Path, exchange: Path, times: dict) -> Path:
    home = base / name
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    start = time.monotonic()
    folder = S.fetch(ASSIGNMENT, home, exchange, env=env)
    times[f"fetch ({name})"] = time.monotonic() - start
    _answer(folder / NOTEBOOK, answers)
    start = time.monotonic()
    S.submit(ASSIGNMENT, home, exchange, student=name, env=env)
    times[f"submit ({name})"] = time.monotonic() - start
    return folder


@pytest.mark.slow
def test_round_trip_grades_as_the_report_does(tmp_path):
    start = time.monotonic()
    course = G.make_course(tmp_path / "grading", COURSE, exchange=tmp_path / "exchange",
                           notebooks=["06"])
    times = {"make the course folder": time.monotonic() - start}
    who = S.Instructor(course)
    who.release(ASSIGNMENT)
    released = _nbgrader_cells(tmp_path / "grading" / "release" / ASSIGNMENT / NOTEBOOK)
    tp = G.GRADED["06-tensor-parallel"]
    assert "raise NotImplementedError(\"g's forward\")" in released[tp.answer][1]   # the skeleton
    assert "BEGIN SOLUTION" not in released[tp.answer][1]
    with ThreadPoolExecutor(2) as pool:    # two students at once, each in a home of their own
        done = [pool.submit(_student, n, a, tmp_path, course.exchange, times)
                for n, a in (("alice", ALICE), ("bob", BOB))]
        for d in done:
            assert (d.result() / NOTEBOOK).is_file()
    who.collect(ASSIGNMENT)
    who.autograde(ASSIGNMENT)
    scores = who.scores(ASSIGNMENT)
    times.update(who.times)
    print("nbgrader round trip, seconds per step:",
          ", ".join(f"{k} {v:.1f}" for k, v in times.items()))

    exercises = course.exercises[ASSIGNMENT]
    assert scores == {"alice": {ex: (0.0, 1.0) for ex in exercises},
                      "bob": {ex: (1.0, 1.0) for ex in exercises}}
    rep = report.collect(tmp_path / "grading" / "autograded")   # <student>/<assignment>/06_*.ipynb
    assert rep.students == ["alice", "bob"]
    solved = S.verdicts(scores)
    for student, want in EXPECTED.items():
        for ex in exercises:
            row = rep.cell(student, ex)
            assert row.status == want[ex], (student, ex, row)
            assert (row.status == "solved") == solved[student][ex], (student, ex, row, scores)
            assert not row.attempts, "an autograder's run counted as the student's try"
    assert "all_gather is not part of this exercise" in rep.cell("alice", "06-tensor-parallel").message
    # the checks' work files of autograde's runs: in the course folder, not the instructor's own
    assert (tmp_path / "grading" / G.AUTOGRADE_WORK / "exercises").is_dir()
