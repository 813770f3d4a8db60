"""`python -m dltutor ...`: the doctor, data staging, the Jupyter kernel and the report, from a shell.

    python -m dltutor doctor                 # the environment table (exit 1 if a row is a problem)
    python -m dltutor data stage --from DIR  # copy a shared CIFAR-10 (or Fashion-MNIST) into the data dir
    python -m dltutor data where             # print the data dir, then what data is there
    python -m dltutor kernel install         # register this python as the Jupyter kernel `dltutor`
    python -m dltutor kernel uninstall       # remove it
    python -m dltutor preflight [--fast] [--site NAME] [--notebooks 02 05]   # the day before class
    python -m dltutor report FOLDER [--csv out.csv] [--html out.html]   # the students' exercises
                                             # from FOLDER/<student>/**/NN_*.ipynb (executed, saved)
    python -m dltutor nbgrader-course COURSE DEST [--exchange DIR] [--notebooks 05 06]
                                             # the exercises as nbgrader assignments, one per notebook
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dltutor.core import flags

def _doctor(args) -> int:
    from dltutor.doctor import PROBLEM, doctor
    rows = doctor(engines_too=not args.no_engines)
    return 1 if any(r.status == PROBLEM for r in rows) else 0


def _data(args) -> int:
    from dltutor.core import env
    from dltutor.data import staging
    if args.action == "where":
        root = args.dest or env.data_dir()
        facts = staging.describe(root)
        print(root)
        print(f"  CIFAR-10: {'staged in ' + facts['cifar10_dir'] if facts['staged'] else 'not staged'}")
        print(f"  Fashion-MNIST: {facts['fashion_mnist']}")
        if not facts["staged"]:
            print(f"  without CIFAR-10 the course trains on: {facts['fallback']}")
        return 0
    try:
        what, path = staging.stage(args.src, dest=args.dest)
    except (FileNotFoundError, staging.CorruptDataError, staging.fashion_mnist.FashionMNISTError) as exc:
        print(f"python -m dltutor data stage: {exc}", file=sys.stderr)
        return 2
    print(f"{what} staged at {path}")
    return 0


def _kernel(args) -> int:
    from dltutor import kernel
    if args.action == "uninstall":
        try:
            print(f"removed the Jupyter kernel {args.name!r} ({kernel.uninstall(args.name)})")
        except LookupError as exc:
            print(f"python -m dltutor kernel uninstall: {exc}", file=sys.stderr)
            return 2
        return 0
    folder = kernel.install(args.name, args.scope, args.display_name)
    print(f"Jupyter kernel {args.name!r} ({args.display_name}) installed in {folder}")
    return 0


def _preflight(args) -> int:
    from dltutor import preflight
    try:
        status, _ = preflight.preflight(args.notebooks, args.site, args.fast, args.out, args.timeout)
    except (ValueError, RuntimeError) as exc:
        print(f"python -m dltutor preflight: {exc}", file=sys.stderr)
        return 2
    return status


def _report(args) -> int:
    from dltutor.grading import report
    try:
        rep = report.collect(args.folder)
    except report.ReportError as exc:
        print(f"python -m dltutor report: {exc}", file=sys.stderr)
        return 2
    print(rep.text())
    for path, write in ((args.csv, rep.csv), (args.html, rep.html)):
        if path is not None:
            write(path)
            print(f"wrote {path}")
    return 0


def _nbgrader_course(args) -> int:
    from dltutor.grading import nbgrader, nbgrader_steps
    try:
        course = nbgrader.make_course(args.dest, args.course_dir, args.exchange, args.course_id,
                                      args.notebooks, args.points, args.timeout)
    except nbgrader.AssignmentError as exc:
        print(f"python -m dltutor nbgrader-course: {exc}", file=sys.stderr)
        return 2
    print(f"nbgrader course {course.course_id!r} in {course.root} (exchange {course.exchange}):")
    for name, ids in course.exercises.items():
        print(f"  source/{name}/: {', '.join(ids)} ({args.points} point{'s' * (args.points != 1)} each)")
    for ex, why in nbgrader.NOT_AUTOGRADED.items():
        print(f"  not an nbgrader test: {ex}: {why}")
    print(f"then, for an assignment A (e.g. {course.assignments[-1]}), in {course.root}: nbgrader "
          f"generate_assignment A; nbgrader release_assignment A; later nbgrader collect A; "
          f"nbgrader autograde A; python -m dltutor report autograded")
    print("students, in their home:", "; ".join(nbgrader_steps.student_commands(
        "A", course.exchange, course.course_id).values()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dltutor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="print the environment table")
    d.add_argument("--no-engines", action="store_true", help="skip the Horovod/DeepSpeed checks")
    d.set_defaults(func=_doctor)

    data = sub.add_parser("data", help="stage or locate course data")
    data.add_argument("action", choices=["stage", "where"])
    data.add_argument("--from", dest="src", type=flags.existing_path, help="a directory holding cifar-10-batches-py or "
                      "cifar-10-python.tar.gz (e.g. a shared copy on the cluster), or the four "
                      "Fashion-MNIST idx files (the stand-in used without CIFAR-10)")
    data.add_argument("--dest", default=None, help="data dir (default: $DLTUTOR_DATA or <cache>/data)")
    data.set_defaults(func=_data)

    k = sub.add_parser("kernel", help="register (or remove) this python as the course's kernel")
    k.add_argument("action", choices=["install", "uninstall"])
    k.add_argument("--name", default="dltutor", help="kernel name (the notebooks use 'dltutor')")
    k.add_argument("--display-name", default="Python (dltutor)")
    k.add_argument("--scope", default="user",
                   help="user (your Jupyter data dir, e.g. on a hub), sys-prefix (this "
                        "environment) or a prefix path")
    k.set_defaults(func=_kernel)

    f = sub.add_parser("preflight", help="run the doctor and every notebook headless, write a report")
    f.add_argument("--fast", action="store_true", help="DLTUTOR_FAST=1: small sizes (a check, not a rehearsal)")
    f.add_argument("--site", default=None, help="site profile for Slurm launches (course/labs/sites; "
                   "default $DLTUTOR_SITE or local)")
    f.add_argument("--notebooks", nargs="+", default=None, metavar="NN",
                   help="only the notebooks whose names start so, e.g. 02 05 (default: all)")
    f.add_argument("--out", type=Path,
                   default=None, help="report folder (default <your own folder>/preflight/<time>: "
                                      "dltutor.core.env.user_dir)")
    f.add_argument("--timeout", type=flags.positive_int, default=1800, help="seconds per notebook cell (default 1800)")
    f.set_defaults(func=_preflight)

    r = sub.add_parser("report", help="the instructor's report: per student, per exercise, from "
                       "the students' executed notebooks")
    r.add_argument("folder", type=Path, help="one folder per student holding their notebooks "
                   "(NN_*.ipynb, executed and saved), e.g. copies of their homes")
    r.add_argument("--csv", type=Path, default=None, help="also write student,exercise,notebook,"
                   "status,message to this file")
    r.add_argument("--html", type=Path, default=None, help="also write the coloured table here")
    r.set_defaults(func=_report)

    g = sub.add_parser("nbgrader-course", help="write an nbgrader course folder: the exercises as "
                       "assignments, the course's checks as the autograder's tests")
    g.add_argument("course_dir", metavar="COURSE", type=flags.existing_dir,
                   help="the course folder (holding labs/ and notebooks/), e.g. the checkout's "
                   "course/ or the installed dltutor/course")
    g.add_argument("dest", type=Path, help="the nbgrader course folder to write (nbgrader_config.py, "
                   "source/<assignment>/)")
    g.add_argument("--exchange", type=Path, default=Path("/srv/nbgrader/exchange"),
                   help="nbgrader's exchange folder, writable by every student (default %(default)s)")
    g.add_argument("--course-id", default="dltutor", help="nbgrader's course id (default dltutor)")
    g.add_argument("--notebooks", nargs="+", default=None, metavar="NN",
                   help="only the notebooks whose names start so, e.g. 05 06 (default: all with exercises)")
    g.add_argument("--points", type=flags.positive_int, default=1, help="points per exercise (default 1)")
    g.add_argument("--timeout", type=flags.positive_int, default=1800,
                   help="seconds per cell when autograde runs a notebook (default 1800)")
    g.set_defaults(func=_nbgrader_course)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = flags.parse(parser, argv)
    if args.command == "data" and args.action == "stage" and not args.src:
        parser.error("data stage needs --from DIR (where the shared CIFAR-10 or Fashion-MNIST copy is)")
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
