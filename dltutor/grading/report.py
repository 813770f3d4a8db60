"""The instructor's report: per student, per exercise, from the students' executed notebooks.

    rep = collect("submitted/")      # root/<student>/**/NN_*.ipynb, one folder per student
    rep                              # in Jupyter: an HTML table (students x exercises, colours)
    rep.csv("grades.csv")            # student,exercise,notebook,status,attempts,first_solved,message
    print(rep.text())                # the table as text, then the counts per exercise

    python -m dltutor report FOLDER [--csv out.csv] [--html out.html]

A check records its verdict in its output's metadata (`dltutor.grading.verdict.RECORD_KEY`) when
it runs in Jupyter; saving the notebook keeps it. The report reads those records: in a notebook,
the last record of an exercise (in cell order) is the student's result; if a student has the
exercise in several notebooks (a copy, a backup), the most recently modified notebook wins. Each
record also carries the student's tally of that exercise at the time of the check
(`dltutor.grading.attempts`): the report shows the tries (checks that ran the student's work)
and when it was first solved, the largest and earliest over every record found, so re-running a
check cell or solving it and breaking it again hides neither. A
record of the course's reference solution (`reference=True`) never counts. An exercise of the
catalog with no record is "not run". A notebook that cannot be read is listed for its student as
"unreadable: ..." and the report goes on.
"""
from __future__ import annotations

import csv
import html
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from dltutor.grading.catalog import EXERCISES
from dltutor.grading.verdict import NOT_YET, RECORD_KEY, SOLVED, WRONG

NOT_RUN = "not run"
UNREADABLE = "unreadable"
ORDER = (SOLVED, WRONG, NOT_YET, NOT_RUN)
NOTEBOOK_NAME = re.compile(r"^\d\d_.*\.ipynb$")
COLOURS = {SOLVED: "#d1f0d9", WRONG: "#ffd8d3", NOT_YET: "#fff1c2", NOT_RUN: "#eeeeee"}
CSV_FIELDS = ("student", "exercise", "notebook", "status", "attempts", "first_solved", "message")


class ReportError(ValueError):
    """The folder cannot be reported on (missing, not a folder, no students' notebooks)."""


@dataclass
class Row:
    student: str
    exercise: str          # a catalog id, or "" for an unreadable notebook
    notebook: str          # relative to the student's folder ("" when not run)
    status: str            # solved / wrong / not yet / not run / unreadable
    message: str = ""
    attempts: int | None = None     # checks that ran the student's work (None: not recorded)
    first_solved: str = ""          # UTC time of the first solved check ("" if never)

    @property
    def tries(self) -> str:
        """" (3 tries)" / " (1 try)" after the status, "" when not recorded."""
        if not self.attempts:
            return ""
        return f" ({self.attempts} tr{'y' if self.attempts == 1 else 'ies'})"


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)

    @property
    def students(self) -> list[str]:
        return sorted({r.student for r in self.rows})

    @property
    def exercises(self) -> list[str]:
        known = [e.id for e in EXERCISES]
        extra = sorted({r.exercise for r in self.rows if r.exercise and r.exercise not in known})
        return known + extra

    def cell(self, student: str, exercise: str) -> Row:
        for r in self.rows:
            if r.student == student and r.exercise == exercise:
                return r
        return Row(student, exercise, "", NOT_RUN)

    def problems(self, student: str) -> list[Row]:
        return [r for r in self.rows if r.student == student and r.status == UNREADABLE]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per exercise: how many students solved / wrong / not yet / not run."""
        out = {}
        for ex in self.exercises:
            n = dict.fromkeys(ORDER, 0)
            for s in self.students:
                n[self.cell(s, ex).status] += 1
            out[ex] = n
        return out

    def csv(self, path=None) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_FIELDS)
        for r in self.rows:
            w.writerow([r.student, r.exercise, r.notebook, r.status,
                        "" if r.attempts is None else r.attempts, r.first_solved, r.message])
        if path is not None:
            Path(path).write_text(buf.getvalue())
        return buf.getvalue()

    def text(self) -> str:
        exs, lines = self.exercises, []
        short = {SOLVED: "solved", WRONG: "WRONG", NOT_YET: "not yet", NOT_RUN: "-"}
        width = max([len("student")] + [len(s) for s in self.students])
        cols = [max(len(e), 17) for e in exs]
        lines.append("  ".join(["student".ljust(width)] + [e.ljust(c) for e, c in zip(exs, cols)]))
        for s in self.students:
            cells = [(short[self.cell(s, e).status] + self.cell(s, e).tries).ljust(c)
                     for e, c in zip(exs, cols)]
            lines.append("  ".join([s.ljust(width)] + cells).rstrip())
            for p in self.problems(s):
                lines.append(f"  {s}: unreadable: {p.notebook}: {p.message}")
        lines.append("")
        n = len(self.students)
        lines.append(f"{n} student{'s' * (n != 1)}; per exercise: " + " / ".join(ORDER))
        for ex, n in self.counts().items():
            lines.append(f"  {ex:<{max(len(e) for e in exs)}}  " + " / ".join(str(n[k]) for k in ORDER))
        firsts = [r for r in self.rows if r.first_solved]
        if firsts:
            lines.append("")
            lines.append("first solved (UTC):")
            lines += [f"  {r.student} {r.exercise}: {r.first_solved}{r.tries}"
                      + ("; its last check is not solved" if r.status != SOLVED else "")
                      for r in firsts]
        wrong = [r for r in self.rows if r.status == WRONG]
        if wrong:
            lines.append("")
            lines.append("wrong, with the check's message:")
            lines += [f"  {r.student} {r.exercise}: {r.message}" for r in wrong]
        return "\n".join(lines)

    def html(self, path=None) -> str:
        e = html.escape
        head = "".join(f"<th>{e(x)}</th>" for x in self.exercises)
        body = []
        for s in self.students:
            tds = []
            for x in self.exercises:
                r = self.cell(s, x)
                tip = f"{r.notebook}: {r.message}" if r.message else r.notebook
                if r.first_solved:
                    tip += f" (first solved {r.first_solved})"
                tds.append(f'<td style="background:{COLOURS[r.status]}" title="{e(tip, quote=True)}">'
                           f"{e(r.status)}<small>{e(r.tries)}</small></td>")
            notes = "; ".join(f"{p.notebook}: unreadable ({p.message})" for p in self.problems(s))
            body.append(f"<tr><th>{e(s)}</th>{''.join(tds)}<td>{e(notes)}</td></tr>")
        legend = " ".join(f'<span style="background:{c};padding:0 6px">{e(k)}</span>'
                          for k, c in COLOURS.items())
        out = (f'<table class="dltutor-report"><thead><tr><th>student</th>{head}<th>notes</th>'
               f"</tr></thead><tbody>{''.join(body)}</tbody></table>"
               f"<p><small>hover a cell for the check's message; {legend}</small></p>")
        if path is not None:
            Path(path).write_text(f"<!doctype html><meta charset='utf-8'><title>dltutor report"
                                  f"</title>{out}\n")
        return out

    def _repr_html_(self) -> str:
        return self.html()


def notebook_records(path) -> dict[str, dict]:
    """The last non-reference verdict record per exercise id in one notebook (cell order).
    Raises ValueError when the file is not a readable notebook."""
    import nbformat
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as exc:   # JSON or schema errors of all kinds: the caller reports them
        raise ValueError(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                         ) from exc
    found = {}
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            rec = (out.get("metadata") or {}).get(RECORD_KEY)
            if isinstance(rec, dict) and rec.get("exercise") and not rec.get("reference"):
                found[rec["exercise"]] = rec
    return found


def _notebooks(folder: Path) -> list[Path]:
    """The course notebooks (NN_*.ipynb) under `folder`, not in hidden folders (.git, checkpoints)."""
    return sorted(p for p in folder.rglob("*.ipynb") if NOTEBOOK_NAME.match(p.name) and
                  not any(part.startswith(".") for part in p.relative_to(folder).parts))


def _tally(rows: list[Row], rec: dict) -> None:
    """Fold one record's tally into every row of its exercise: most tries, earliest solved."""
    n = rec.get("attempts")
    n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
    first = rec.get("first_solved") if isinstance(rec.get("first_solved"), str) else ""
    for row in rows:
        if n is not None:
            row.attempts = max(n, row.attempts or 0)
        if first and (not row.first_solved or first < row.first_solved):
            row.first_solved = first


def _student_rows(student: str, folder: Path) -> list[Row]:
    latest: dict[str, tuple[float, Row]] = {}
    tallies: dict[str, list[dict]] = {}
    rows = []
    for nb in _notebooks(folder):
        rel = str(nb.relative_to(folder))
        try:
            records = notebook_records(nb)
        except ValueError as exc:
            rows.append(Row(student, "", rel, UNREADABLE, str(exc)))
            continue
        when = nb.stat().st_mtime
        for ex, rec in records.items():
            status = rec.get("status") if rec.get("status") in (SOLVED, WRONG, NOT_YET) else WRONG
            row = Row(student, ex, rel, status, str(rec.get("message", "")))
            if ex not in latest or when >= latest[ex][0]:
                latest[ex] = (when, row)
            tallies.setdefault(ex, []).append(rec)
    for ex, recs in tallies.items():
        for rec in recs:
            _tally([latest[ex][1]], rec)
    known = [e.id for e in EXERCISES]
    for ex in known + sorted(set(latest) - set(known)):
        rows.append(latest[ex][1] if ex in latest else Row(student, ex, "", NOT_RUN))
    return rows


def collect(root) -> Report:
    """The report over `root/<student>/**/NN_*.ipynb`; ReportError if there is nothing to read."""
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"{root} is not a folder: give the folder holding one folder per student")
    students = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    with_notebooks = [p for p in students if _notebooks(p)]
    if not with_notebooks:
        raise ReportError(f"no students' notebooks in {root}: expected {root}/<student>/.../NN_*.ipynb "
                          f"(one folder per student, e.g. copies of their homes)")
    rep = Report()
    for folder in with_notebooks:
        rep.rows += _student_rows(folder.name, folder)
    return rep
