"""nbgrader's round trip for the course's assignments: the instructor's steps, the students' commands.

    course = nbgrader.make_course("grading/", exchange=ex)        # dltutor.grading.nbgrader
    who = Instructor(course)              # runs nbgrader's own CLI in the course folder
    who.release("06_model_parallelism")   # generate_assignment, then release_assignment
    ...                                   # students: fetch_assignment, work, submit (below)
    who.collect("06_model_parallelism")
    who.autograde("06_model_parallelism") # runs each submitted notebook on the kernel it names
    who.scores("06_model_parallelism")    # {student: {exercise: (score, max_score)}}
    who.times                             # {step: seconds} of the steps run so far

The students' side, from a terminal in their home (or the Assignments tab of JupyterLab, with the
same exchange in their nbgrader config): `student_commands(assignment, exchange)`, i.e.

    nbgrader fetch_assignment ASSIGNMENT --course dltutor --Exchange.root=EXCHANGE
    nbgrader submit ASSIGNMENT --course dltutor --Exchange.root=EXCHANGE

`fetch` and `submit` run those for a student (a test's, or a script's); `student` names the
submission when every student is the same Unix user (a test run as one account).
`python -m dltutor report <course>/autograded` reads the same notebooks as nbgrader graded them
(autograded/<student>/<assignment>/NN_*.ipynb): the record each check left, per exercise.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from dltutor.grading.nbgrader import COURSE_ID, Course

STEP_TIMEOUT = 600        # s for one nbgrader command that runs no notebook
GRADE_TIMEOUT = 3600      # s for autograde (every submission, run cell by cell)


class NbgraderError(RuntimeError):
    """An nbgrader command failed or timed out; the message holds its last lines."""


def nbgrader_command(*args: str) -> list[str]:
    """nbgrader's CLI from this environment (the one that has the course's kernel)."""
    return [sys.executable, "-m", "nbgrader", *args]


def run_nbgrader(cwd, *args: str, env=None, timeout: float = STEP_TIMEOUT) -> str:
    """Run `nbgrader ARGS` in `cwd`; its output, or NbgraderError with its last lines."""
    cmd = nbgrader_command(*args)
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise NbgraderError(f"`nbgrader {' '.join(args)}` did not finish in {timeout:.0f} s") from exc
    out = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-15:])
        raise NbgraderError(f"`nbgrader {' '.join(args)}` in {cwd} failed (exit {done.returncode}):"
                            f"\n{tail}")
    return out


def prepare_exchange(exchange) -> Path:
    """Make the exchange folder, readable and writable by every student (nbgrader's requirement;
    its own folders in it get their modes from nbgrader)."""
    path = Path(exchange)
    path.mkdir(parents=True, exist_ok=True)
    if path.stat().st_uid == os.getuid():
        path.chmod(0o777)
    return path


def exchange_flag(exchange) -> str:
    return f"--Exchange.root={Path(exchange).resolve()}"


def student_commands(assignment: str, exchange, course_id: str = COURSE_ID) -> dict[str, str]:
    """The student's steps as shell commands (run in their home): fetch, then submit."""
    flags = f"--course {course_id} {exchange_flag(exchange)}"
    return {"fetch": f"nbgrader fetch_assignment {assignment} {flags}",
            "submit": f"nbgrader submit {assignment} {flags}"}


def fetch(assignment: str, home, exchange, course_id: str = COURSE_ID, env=None) -> Path:
    """A student fetches the assignment into `home`; the folder it landed in."""
    run_nbgrader(home, "fetch_assignment", assignment, "--course", course_id,
                 exchange_flag(exchange), env=env)
    return Path(home) / assignment


def submit(assignment: str, home, exchange, course_id: str = COURSE_ID, student: str | None = None,
           env=None) -> None:
    """A student submits `home/assignment`; `student`: the id to submit under (default: the
    Unix user, as on a hub)."""
    who = ("--student", student) if student else ()
    run_nbgrader(home, "submit", assignment, "--course", course_id, exchange_flag(exchange), *who,
                 env=env)


class Instructor:
    """The instructor's steps in the course folder of `course` (`dltutor.grading.nbgrader`)."""

    def __init__(self, course: Course, env=None):
        self.course, self.env, self.times = course, env, {}

    def _run(self, step: str, *args: str, timeout: float = STEP_TIMEOUT) -> str:
        start = time.monotonic()
        out = run_nbgrader(self.course.root, *args, exchange_flag(self.course.exchange),
                           env=self.env, timeout=timeout)
        self.times[step] = self.times.get(step, 0.0) + time.monotonic() - start
        return out

    def release(self, assignment: str) -> None:
        """generate_assignment (release/ from source/), then release_assignment to the exchange."""
        prepare_exchange(self.course.exchange)
        self._run("generate", "generate_assignment", assignment, "--force")
        self._run("release", "release_assignment", assignment, "--force")

    def collect(self, assignment: str) -> None:
        self._run("collect", "collect", assignment, "--update")

    def autograde(self, assignment: str, timeout: float = GRADE_TIMEOUT) -> None:
        """Run every collected submission (work files and tries: see the course's config)."""
        self._run("autograde", "autograde", assignment, "--force", timeout=timeout)

    def scores(self, assignment: str) -> dict[str, dict[str, tuple[float, float]]]:
        """{student: {grade id (the exercise id): (score, max_score)}} from nbgrader's gradebook."""
        from nbgrader.api import Gradebook
        url = f"sqlite:///{self.course.root / 'gradebook.db'}"
        out = {}
        with Gradebook(url, course_id=self.course.course_id) as gb:
            for sub in gb.assignment_submissions(assignment):
                grades = out.setdefault(sub.student_id, {})
                for nb in sub.notebooks:
                    for grade in nb.grades:
                        grades[grade.name] = (float(grade.score), float(grade.max_score))
        return out


def verdicts(scores: dict[str, dict[str, tuple[float, float]]]) -> dict[str, dict[str, bool]]:
    """{student: {exercise: solved?}}: full points is solved, anything less is not."""
    return {s: {ex: score >= top for ex, (score, top) in grades.items()} for s, grades in scores.items()}
