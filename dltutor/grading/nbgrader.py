"""The course's exercises as nbgrader assignments: one per notebook, the course's checks as tests.

    course = make_course("grading/", exchange="/srv/nbgrader/exchange")   # nbgrader's course folder
    course.assignments          # ["05_ring_allreduce_visualizer", ...], one per notebook
    python -m dltutor nbgrader-course COURSE DEST [--exchange DIR] [--notebooks 05 06]

`make_course` writes DEST/nbgrader_config.py (course id, exchange root, the autograder's cell
timeout; its runs keep their work files in DEST/autograde-work and count no student's tries)
and DEST/source/<notebook name>/<notebook>.ipynb: the course notebook with its exercises marked
for nbgrader (schema 3), every other cell as it is:

  - the cell the student writes (the `%%writefile` script, the function) an **answer cell**
    (solution, not graded), handed out as the course's skeleton: it ends with an empty
    `### BEGIN SOLUTION` / `### END SOLUTION` region, which the release turns into nothing
    (`ClearSolutions.code_stub` is "" in the config), so the student gets the skeleton, not nbgrader's
    stub in place of it;
  - the check cell an **autograder-tests cell** (graded, `POINTS` points, locked; grade id = the
    exercise id): the course's own check, as in the notebook, with the verdict it returns through
    `must_pass`, which raises AssertionError unless it is "solved". The check still prints its
    verdict and records it in the output (`dltutor.grading.verdict`), so the autograded notebook
    carries the same record `python -m dltutor report` reads: both read one verdict.

08-diagnose is not an nbgrader test (`NOT_AUTOGRADED`): its notebook draws a new broken run each
time it runs, so an autograder's run would judge the student's answer against another run.
The instructor's steps (release, collect, autograde, scores) are in `dltutor.grading.nbgrader_steps`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dltutor.grading.catalog import EXERCISES

COURSE_ID = "dltutor"
POINTS = 1                       # per exercise, the default of `make_course`
CELL_TIMEOUT = 1800              # s per cell when autograde runs a notebook (preflight's default)
SOLUTION_REGION = "### BEGIN SOLUTION\n### END SOLUTION"
AUTOGRADE_WORK = "autograde-work"   # in the course folder: the work files of autograde's runs


@dataclass(frozen=True)
class Graded:
    answer: str       # the id of the cell the student writes
    check: str        # the id of the check cell
    call: str         # the check's call in it, whose value (the verdict's ok) must be True


GRADED = {
    "01-batch-size": Graded("2606f9e1", "a14c0b1c",
                            "batch_exercise.check(measure, BATCH_SIZES, results, best_batch_size, setup)"),
    "02-ddp": Graded("433c7f63", "817a3c7d", "exercise_check.check(MY_DDP)"),
    "03-horovod": Graded("9f83537d", "0acf466f", "hvd_exercise.check(MY_HVD)"),
    "04-memory": Graded("8ab2ce72", "a0b67f32", "exercise_memory.check(model_state_bytes, "
                        "d_16gb_answer, d_80gb_answer, EXERCISE_P, **EX_ACT)"),
    "04-zero1": Graded("b8453ec3", "68ddbbf0", "exercise_zero1.check(MY_ZERO1)"),
    "05-reduce-scatter": Graded("d807b639", "a7de2f44", "rs_exercise.check(MY_STEP)"),
    "06-tensor-parallel": Graded("b584e3f3", "65379bd8", "exercise_tp.check(MY_TP)"),
    "06-pipeline": Graded("168641ea", "1de53572", "exercise_pp.check(MY_PP)"),
    "06-placement": Graded("0db59896", "28b58cf8", "exercise_place.check(place)"),
    "07-file-sharding": Graded("826e7460", "cf2d2464", "exercise_shards.check(MY_SHARDS)"),
    "08-fix-hang": Graded("207fc08a", "4c3e44c8", "exercise_hang.check(MY_FIX)"),
    "09-ring-attention": Graded("c3a91f52", "5e07b2d4", "exercise_ring.check(MY_RING)"),
    "09-moe-dispatch": Graded("8d4f6a13", "e2b95c70", "exercise_dispatch.check(MY_MOE)"),
    "10-resume": Graded("a7e3c1d0", "b94f2e61", "exercise_resume.check(MY_RESUME)"),
}
NOT_AUTOGRADED = {
    "08-diagnose": "each run of notebook 08 draws a new broken run to diagnose, so the autograder's "
                   "run would judge the answer against a run the student never saw: grade it with "
                   "`python -m dltutor report` over the students' saved notebooks",
}
IMPORT = "from dltutor.grading.nbgrader import must_pass   # nbgrader's test: AssertionError unless solved\n"


class AssignmentError(ValueError):
    """The course or a notebook is not what the assignment needs (a cell missing, a bad folder)."""


def must_pass(exercise: str, ok) -> bool:
    """The autograder's test: `ok` is what the course's check returned (its verdict's `ok`);
    anything but True fails the test, with the exercise named (the verdict is printed above)."""
    if ok is not True:
        raise AssertionError(f"{exercise}: the course's check did not pass (its verdict is printed "
                             f"above this line)")
    return True


def assignment_name(notebook: str) -> str:
    """The assignment of a course notebook: its name without .ipynb, e.g. 05_ring_allreduce_visualizer."""
    return Path(notebook).stem


def _meta(grade_id: str, *, solution: bool, grade: bool, points: int = 0) -> dict:
    meta = {"grade_id": grade_id, "solution": solution, "grade": grade, "locked": grade,
            "schema_version": 3}
    if grade:
        meta["points"] = points
    return meta


def _cell(nb, cell_id: str, exercise: str):
    for cell in nb.cells:
        if cell.get("id") == cell_id:
            return cell
    raise AssignmentError(f"{exercise}: no cell {cell_id!r} in the notebook: the course notebook "
                          f"changed; update dltutor.grading.nbgrader.GRADED")


def autograder_source(exercise: str, check_source: str, call: str) -> str:
    """The check cell's code with its check call wrapped in `must_pass` (the rest as it is)."""
    if check_source.count(call) != 1:
        raise AssignmentError(f"{exercise}: the check cell does not call {call!r} once; update "
                              f"dltutor.grading.nbgrader.GRADED")
    return IMPORT + check_source.replace(call, f"must_pass({exercise!r}, {call})")


def mark_exercises(nb, name: str, points: int = POINTS) -> list[str]:
    """Mark, in place, every autograded exercise of `nb`, the course notebook `name` (its file
    name); return their ids."""
    marked = []
    for ex in EXERCISES:
        if ex.notebook != name or ex.id not in GRADED:
            continue
        g = GRADED[ex.id]
        answer, check = _cell(nb, g.answer, ex.id), _cell(nb, g.check, ex.id)
        answer.source = answer.source.rstrip("\n") + "\n" + SOLUTION_REGION
        answer.metadata["nbgrader"] = _meta(f"{ex.id}-answer", solution=True, grade=False)
        check.source = autograder_source(ex.id, check.source, g.call)
        check.metadata["nbgrader"] = _meta(ex.id, solution=False, grade=True, points=points)
        check.outputs, check.execution_count = [], None
        marked.append(ex.id)
    return marked


def graded_notebooks() -> list[str]:
    """The course notebooks that hold at least one autograded exercise, in course order."""
    return list(dict.fromkeys(e.notebook for e in EXERCISES if e.id in GRADED))


@dataclass
class Course:
    root: Path                     # the nbgrader course folder (nbgrader_config.py, source/)
    exchange: Path
    course_id: str = COURSE_ID
    assignments: list[str] = field(default_factory=list)
    exercises: dict[str, list[str]] = field(default_factory=dict)   # assignment -> exercise ids


def config_text(course_id: str, exchange: Path, timeout: int, work: Path) -> str:
    return (f'"""nbgrader\'s settings for the dltutor course (written by python -m dltutor '
            f'nbgrader-course)."""\nimport os\n\nc = get_config()  # noqa: F821\n'
            f"c.CourseDirectory.course_id = {course_id!r}\n"
            f"c.Exchange.root = {str(exchange)!r}     # readable and writable by every student\n"
            f"c.ClearSolutions.code_stub = {{'python': ''}}   # the answer cells keep the course's skeleton\n"
            f"c.Execute.timeout = {timeout}     # s per cell: the checks launch ranks\n"
            f"# autograde: the students' work files go here, not into the instructor's own folder,\n"
            f"# and its runs of the checks are no student's tries (dltutor.grading.attempts)\n"
            f"os.environ['DLTUTOR_USER_DIR'] = {str(work)!r}\n"
            f"os.environ['DLTUTOR_ATTEMPTS'] = os.devnull\n")


def _pick(notebooks, wanted) -> list[str]:
    if not wanted:
        return notebooks
    picked = [n for n in notebooks if any(n.startswith(w) for w in wanted)]
    if not picked:
        raise AssignmentError(f"no notebook with exercises starts with {', '.join(wanted)}: "
                              f"choose among {', '.join(n[:2] for n in notebooks)}")
    return picked


def make_course(dest, course_dir=None, exchange=None, course_id: str = COURSE_ID,
                notebooks=None, points: int = POINTS, timeout: int = CELL_TIMEOUT) -> Course:
    """Write the nbgrader course folder `dest` from the course folder `course_dir` (holding
    notebooks/; default: this environment's course). `notebooks`: name prefixes ("05", "06"),
    default every notebook with an autograded exercise. `exchange`: default /srv/nbgrader/exchange."""
    import nbformat
    from dltutor.core.course import installed_course
    course_dir = Path(course_dir) if course_dir is not None else installed_course()
    if not (course_dir / "notebooks").is_dir():
        raise AssignmentError(f"{course_dir} has no notebooks/ folder: give the course folder "
                              f"(the one holding labs/ and notebooks/)")
    if points < 1:
        raise AssignmentError(f"points per exercise must be 1 or more, not {points}")
    root = Path(dest).expanduser().resolve()
    exchange = Path(exchange or "/srv/nbgrader/exchange").expanduser().resolve()
    course = Course(root, exchange, course_id)
    for name in _pick(graded_notebooks(), notebooks):
        nb = nbformat.read(str(course_dir / "notebooks" / name), as_version=4)
        ids = mark_exercises(nb, name, points)
        folder = root / "source" / assignment_name(name)
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(folder / name))
        course.assignments.append(assignment_name(name))
        course.exercises[assignment_name(name)] = ids
    (root / "nbgrader_config.py").write_text(config_text(course_id, exchange, timeout, root / AUTOGRADE_WORK))
    return course
