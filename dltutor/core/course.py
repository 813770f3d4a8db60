"""Where the course's files are, found without assuming a checkout, and their tagged lines.

The course folder holds `labs/` (the scripts the notebooks launch, site profiles, job templates)
and `notebooks/`. `course_root()` finds it in this order:

  1. `$DLTUTOR_COURSE`, when set (a copy on scratch, a shared read-only install, ...);
  2. the copy shipped inside the installed package (`dltutor/course`, from a wheel);
  3. the `course/` folder beside the package in a source checkout (an editable install).

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


def course_root() -> Path:
    """The folder that holds `labs/` and `notebooks/` (see the module docstring for the order)."""
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


def lab(relative: str) -> Path:
    """A file under `labs/`, e.g. lab('02_ddp/train.py'); CourseNotFound names what is missing."""
    path = course_root() / "labs" / relative
    if not path.exists():
        raise CourseNotFound(f"no {relative} under {course_root() / 'labs'}: this course folder "
                             f"is incomplete; set {COURSE_ENV} to a full copy of the course")
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
