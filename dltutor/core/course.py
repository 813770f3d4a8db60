"""Where the course's files are, found without assuming a checkout, and their tagged lines.

The course folder holds `labs/` (the scripts the notebooks launch, site profiles, job templates)
and `notebooks/`. `course_root()` finds it in this order:

  1. the copy the running notebook was opened from (`opened_copy()`): the course folder whose
     `notebooks/` holds the working directory. A kernel runs in its notebook's folder (Jupyter,
     papermill's `cwd=`, nbval), so a notebook opened from a student's copy (the nbgitpuller
     hand-out, `~/dltutor/course/notebooks/...`) launches that copy's labs, with the student's
     edits, even though the kernel's `$DLTUTOR_COURSE` names the install;
  2. `$DLTUTOR_COURSE`, when set (what `python -m dltutor kernel install` writes into kernel.json:
     a copy on scratch, a shared read-only install, ...);
  3. the copy shipped inside the installed package (`dltutor/course`, from a wheel);
  4. the `course/` folder beside the package in a source checkout (an editable install).
2-4 are `installed_course()`. A process started elsewhere (a shell in the checkout, a batch job)
gets 2-4; `dltutor.launch.run.launch` hands its ranks `$DLTUTOR_COURSE` = its own `course_root()`,
so a rank that looks up a course file (a site profile) finds the same copy as the cell did.
`lab_origin(script)` says which copy a lab comes from ("lab 02_ddp/train.py from your copy ...");
every launch prints it.

A wrong setting is one clear error that says what to set, never a file-not-found later on.
`tagged_lines`/`show_tagged` print the lines of a lab that carry a tag such as `# DDP:` (what
changes from a single-process loop to a distributed one).
"""
from __future__ import annotations

import os
from pathlib import Path

COURSE_ENV = "DLTUTOR_COURSE"


class CourseNotFound(FileNotFoundError):
    """The course folder (labs/, notebooks/) is not where the settings say."""


def _is_course(path: Path) -> bool:
    return (path / "labs").is_dir()


def opened_copy(cwd=None) -> Path | None:
    """The course copy the running notebook was opened from: the course folder whose `notebooks/`
    holds `cwd` (default: the working directory, the notebook's folder in a kernel), else None."""
    try:
        here = Path.cwd() if cwd is None else Path(cwd).expanduser().resolve()
    except OSError:   # the working directory was removed
        return None
    for folder in (here, *here.parents):
        if folder.name == "notebooks" and _is_course(folder.parent):
            return folder.parent
    return None


def installed_course() -> Path:
    """The course of this environment: `$DLTUTOR_COURSE`, else the package's copy, else the
    checkout's `course/` (the module docstring's steps 2-4)."""
    setting = os.environ.get(COURSE_ENV)
    if setting:
        path = Path(setting).expanduser()
        if not _is_course(path):
            raise CourseNotFound(f"{COURSE_ENV}={setting} has no labs/ folder: point it at the "
                                 "course folder (the one holding labs/ and notebooks/), or unset it")
        return path.resolve()
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "course", package.parent / "course"):
        if _is_course(candidate):
            return candidate
    raise CourseNotFound(f"no course folder found (looked in {package / 'course'} and "
                         f"{package.parent / 'course'}): install dltutor from its wheel or a "
                         f"checkout, or set {COURSE_ENV} to the folder holding labs/ and notebooks/")


def course_root() -> Path:
    """The folder that holds `labs/` and `notebooks/`: the copy the notebook was opened from,
    else the installed course (see the module docstring for the order)."""
    return opened_copy() or installed_course()


def lab_origin(script) -> str | None:
    """Which course copy the lab `script` comes from, in one line ("lab 02_ddp/train.py from your
    copy /home/ann/dltutor/course"); None for a script outside any course's `labs/` (an exercise
    answer in the student's folder) and for a reference solution that an exercise check runs."""
    path = Path(script).expanduser().resolve()
    labs = next((f for f in path.parents if f.name == "labs" and _is_course(f.parent)), None)
    if labs is None or "solutions" in path.relative_to(labs).parts:
        return None         # an answer of the student's, or the reference a check runs
    copy, where = labs.parent, "the course folder"
    try:
        installed = installed_course().resolve()
    except CourseNotFound:
        installed = None
    if copy == installed:
        where = "the installed course"
    elif copy == opened_copy():
        where = "your copy"
    return f"lab {path.relative_to(labs).as_posix()} from {where} {copy}"


def lab(relative: str) -> Path:
    """A file under `labs/`, e.g. lab('02_ddp/train.py'); CourseNotFound names what is missing."""
    root = course_root()
    path = root / "labs" / relative
    if not path.exists():
        fix = ("pull the course again (open the hand-out link) or restore the file from git"
               if root == opened_copy() else f"set {COURSE_ENV} to a full copy of the course")
        raise CourseNotFound(f"no {relative} under {root / 'labs'}: this course folder is "
                             f"incomplete; {fix}")
    return path


def tagged_lines(path, tag: str = "# DDP:") -> list[tuple[int, str]]:
    """`(line number, line)` for every line of `path` that contains `tag`."""
    text = Path(path).read_text().splitlines()
    return [(i, line.rstrip()) for i, line in enumerate(text, start=1) if tag in line]


def show_tagged(path, tag: str = "# DDP:", context: int = 0) -> list[tuple[int, str]]:
    """Print the tagged lines of `path` (with `context` lines around each) and return them."""
    lines = Path(path).read_text().splitlines()
    hits = tagged_lines(path, tag)
    wanted = sorted({j for i, _ in hits for j in range(max(1, i - context),
                                                       min(len(lines), i + context) + 1)})
    print(f"{len(hits)} lines tagged {tag!r} in {Path(path).name}:")
    previous = None
    for j in wanted:
        if previous is not None and j != previous + 1:
            print("     ...")
        mark = ">" if tag in lines[j - 1] else " "
        print(f"{mark}{j:4d}  {lines[j - 1].rstrip()}")
        previous = j
    return hits
