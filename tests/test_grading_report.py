"""The instructor's side of the exercises: verdicts, the report from executed notebooks, the link.

Three made-up students' executed notebooks are built with nbformat; their outputs carry the records
that `dltutor.grading.verdict` writes (made by the verdict functions' `.record()`, not by hand).
One test executes a notebook in a real Jupyter kernel to show that `Verdict.show()` itself puts the
record into the saved notebook.
"""
import csv
import io
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import nbformat
import pytest

from dltutor import cli
from dltutor.grading import attempts, report, verdict
from dltutor.grading.catalog import EXERCISES
from dltutor.grading.handout import gitpuller_link

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- verdicts
def test_verdict_text_forms():
    assert verdict.solved("02-ddp", "weights equal to 1e-7").text() == "passed: weights equal to 1e-7"
    assert verdict.not_yet("02-ddp", "TODO 1 still raises").text() == "not yet: TODO 1 still raises"
    one = verdict.wrong("04-zero1", "rank 1: x differs by 1e-3")
    assert one.text() == "wrong: rank 1: x differs by 1e-3" and not one.ok
    two = verdict.wrong("04-zero1", "rank 0: m differs", "rank 1: v differs")
    assert two.text() == "wrong:\n  - rank 0: m differs\n  - rank 1: v differs"
    assert two.message == "rank 0: m differs; rank 1: v differs"
    assert two.record() == {"exercise": "04-zero1", "status": "wrong",
                            "message": "rank 0: m differs; rank 1: v differs", "reference": False}
    assert verdict.solved("02-ddp", "ok", reference=True).record()["reference"] is True
    with pytest.raises(ValueError, match="status must be one of"):
        verdict.Verdict("02-ddp", "maybe")


def test_verdict_from_problems():
    ok = verdict.from_problems("05-reduce-scatter", [], "3 ranks agree")
    assert ok.status == verdict.SOLVED and ok.text() == "passed: 3 ranks agree"
    bad = verdict.from_problems("05-reduce-scatter", ["rank 2: chunk 1 differs by 4"], "unused")
    assert bad.status == verdict.WRONG and bad.message == "rank 2: chunk 1 differs by 4"
    unstarted = verdict.from_problems("05-reduce-scatter", ["TODO"], "unused", started=False)
    assert unstarted.status == verdict.NOT_YET


def test_show_outside_jupyter_prints_only(capsys):
    assert verdict.solved("02-ddp", "fine").show() is True
    assert capsys.readouterr().out == "passed: fine\n"


# ---------------------------------------------------------------- three made-up students
def _output(v: verdict.Verdict) -> dict:
    """A check cell's badge output as Jupyter saves it: the record in its metadata."""
    return nbformat.v4.new_output("display_data", data={"text/plain": v.text()},
                                  metadata={verdict.RECORD_KEY: v.record()})


def _notebook(path: Path, *cells_outputs: list) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("# exercise"))
    for outputs in cells_outputs:
        cell = nbformat.v4.new_code_cell("check(MY_SCRIPT);")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="...\n"), *outputs]
        nb.cells.append(cell)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


@pytest.fixture()
def classroom(tmp_path):
    root = tmp_path / "submitted"
    # ada solved two: 02 after a first wrong try (the later cell wins), and 05
    _notebook(root / "ada/course/notebooks/02_ddp_multi_gpu.ipynb",
              [_output(verdict.wrong("02-ddp", "rank 1 read the whole data set"))],
              [_output(verdict.solved("02-ddp", "both ranks equal the reference to 3e-8"))])
    _notebook(root / "ada/course/notebooks/05_ring_allreduce_visualizer.ipynb",
              [_output(verdict.solved("05-reduce-scatter", "3 ranks, every chunk exact"))])
    # an older copy of 02 elsewhere in her home: the most recently saved notebook counts
    old = root / "ada/backup/02_ddp_multi_gpu.ipynb"
    _notebook(old, [_output(verdict.wrong("02-ddp", "an old try"))])
    os.utime(old, (old.stat().st_atime - 86400, old.stat().st_mtime - 86400))
    # JupyterLab's autosave copy of an older state is not the student's notebook
    _notebook(root / "ada/course/notebooks/.ipynb_checkpoints/04_deepspeed_out_of_core_bert-checkpoint.ipynb",
              [_output(verdict.wrong("04-zero1", "an old try"))])
    _notebook(root / "ada/course/notebooks/.ipynb_checkpoints/04_deepspeed_out_of_core_bert.ipynb",
              [_output(verdict.wrong("04-zero1", "an old try"))])
    # bob: a wrong ZeRO-1 with its message; his reference-solution run must not count
    _notebook(root / "bob/04_deepspeed_out_of_core_bert.ipynb",
              [_output(verdict.wrong("04-zero1", "rank 1: exp_avg differs by 1e-3"))],
              [_output(verdict.solved("04-zero1", "reference ok", reference=True))],
              [_output(verdict.solved("04-memory", "reference ok", reference=True))])
    _notebook(root / "bob/02_ddp_multi_gpu.ipynb", [])
    # cy ran nothing, and one of her notebooks is corrupt
    _notebook(root / "cy/course/notebooks/01_single_gpu_cifar10.ipynb", [])
    (root / "cy/course/notebooks/03_horovod_synthetic_resnet50.ipynb").write_text('{"cells": [')
    return root


def test_collect_three_students(classroom):
    rep = report.collect(classroom)
    assert rep.students == ["ada", "bob", "cy"]
    status = {(r.student, r.exercise): r.status for r in rep.rows}
    assert status[("ada", "02-ddp")] == "solved" and status[("ada", "05-reduce-scatter")] == "solved"
    assert status[("bob", "04-zero1")] == "wrong" and status[("ada", "04-zero1")] == "not run"
    assert rep.cell("bob", "04-zero1").message == "rank 1: exp_avg differs by 1e-3"
    assert rep.cell("bob", "04-zero1").notebook == "04_deepspeed_out_of_core_bert.ipynb"
    assert rep.cell("ada", "02-ddp").notebook == "course/notebooks/02_ddp_multi_gpu.ipynb"
    assert status[("bob", "04-memory")] == "not run"           # only the reference ran
    assert all(status[("cy", e.id)] == "not run" for e in EXERCISES)
    [bad] = rep.problems("cy")
    assert bad.status == "unreadable" and bad.notebook.endswith("03_horovod_synthetic_resnet50.ipynb")
    assert sum(status[("ada", e.id)] == "solved" for e in EXERCISES) == 2
    counts = rep.counts()
    assert counts["02-ddp"] == {"solved": 1, "wrong": 0, "not yet": 0, "not run": 2}
    assert counts["04-zero1"] == {"solved": 0, "wrong": 1, "not yet": 0, "not run": 2}


def test_csv_and_html(classroom, tmp_path):
    rep = report.collect(classroom)
    rows = list(csv.DictReader(io.StringIO(rep.csv(tmp_path / "out.csv"))))
    assert (tmp_path / "out.csv").read_text() == rep.csv()
    assert list(rows[0]) == ["student", "exercise", "notebook", "status", "attempts",
                             "first_solved", "message"]
    assert {"student": "bob", "exercise": "04-zero1", "notebook": "04_deepspeed_out_of_core_bert.ipynb",
            "status": "wrong", "attempts": "", "first_solved": "",
            "message": "rank 1: exp_avg differs by 1e-3"} in rows
    assert len([r for r in rows if r["student"] == "ada"]) == len(EXERCISES)
    page = rep._repr_html_()
    assert page.split("<tbody>")[1].count("<tr><th>") == 3 and all(e.id in page for e in EXERCISES)
    for word in ("solved", "wrong", "not run", "unreadable"):
        assert word in page
    assert 'title="04_deepspeed_out_of_core_bert.ipynb: rank 1: exp_avg differs by 1e-3"' in page
    rep.html(tmp_path / "out.html")
    assert page in (tmp_path / "out.html").read_text()


def test_cli_report(classroom, tmp_path, capsys):
    assert cli.main(["report", str(classroom), "--csv", str(tmp_path / "g.csv"),
                     "--html", str(tmp_path / "g.html")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["student", EXERCISES[0].id, EXERCISES[1].id]
    assert [ln.split()[0] for ln in lines[1:4] if ln.strip()][:2] == ["ada", "bob"]
    assert "cy: unreadable: course/notebooks/03_horovod_synthetic_resnet50.ipynb: " in out
    assert any(ln.split()[:2] == ["02-ddp", "1"] and ln.split()[-1] == "2" for ln in lines), out
    assert "bob 04-zero1: rank 1: exp_avg differs by 1e-3" in out
    assert (tmp_path / "g.csv").is_file() and "<table" in (tmp_path / "g.html").read_text()


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_cli_report_bad_folder(tmp_path, capsys, make):
    folder = tmp_path / "x"
    if make == "empty":
        (folder / "ada").mkdir(parents=True)
    elif make == "file":
        folder.write_text("not a folder")
    assert cli.main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m dltutor report: ") and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- tries and first solved
@pytest.fixture()
def history(tmp_path, monkeypatch):
    path = tmp_path / "home" / ".local/share/dltutor/attempts.jsonl"
    monkeypatch.setenv(attempts.ENV, str(path))
    return path


def test_show_keeps_every_try_and_the_first_solved_time(history, capsys):
    shown = [verdict.not_yet("02-ddp", "skeleton"), verdict.wrong("02-ddp", "summed"),
             verdict.solved("02-ddp", "ok"), verdict.wrong("02-ddp", "broke it again"),
             verdict.solved("05-reduce-scatter", "ok"), verdict.solved("02-ddp", "ok", reference=True)]
    for v in shown:
        v.show()
    records = [v.record() for v in shown]
    assert [r.get("attempts") for r in records] == [0, 1, 2, 3, 1, None]  # not yet and the reference don't count
    assert records[1]["first_solved"] is None and records[2]["first_solved"] == records[2]["time"]
    assert records[3]["first_solved"] == records[2]["time"]      # a later wrong keeps it
    assert "attempts" not in records[5] and len(history.read_text().splitlines()) == 5
    assert attempts.summary(attempts.history("02-ddp")) == {"attempts": 3,
                                                            "first_solved": records[2]["time"]}


def test_a_history_that_cannot_be_written_still_shows_the_verdict(tmp_path, monkeypatch, capsys):
    (tmp_path / "f").write_text("a file where the folder should be")
    monkeypatch.setenv(attempts.ENV, str(tmp_path / "f" / "attempts.jsonl"))
    assert verdict.wrong("02-ddp", "summed").show() is False
    assert capsys.readouterr().out == "wrong: summed\n"


def test_report_shows_tries_and_first_solved_even_when_the_last_check_is_wrong(history, tmp_path,
                                                                              capsys):
    outs = []
    for v in (verdict.wrong("04-zero1", "a"), verdict.wrong("04-zero1", "b"),
              verdict.solved("04-zero1", "c"), verdict.wrong("04-zero1", "d")):
        v.show()
        outs.append(_output(v))
    # the check cell re-run four times: only its last output is saved, the tally is not lost
    _notebook(tmp_path / "class/eve/04_deepspeed_out_of_core_bert.ipynb", [outs[-1]])
    row = report.collect(tmp_path / "class").cell("eve", "04-zero1")
    solved_at = outs[2]["metadata"][verdict.RECORD_KEY]["time"]
    assert (row.status, row.attempts, row.first_solved) == ("wrong", 4, solved_at)
    rep = report.collect(tmp_path / "class")
    assert {"attempts": "4", "first_solved": solved_at}.items() <= next(
        r for r in csv.DictReader(io.StringIO(rep.csv())) if r["exercise"] == "04-zero1").items()
    assert f"eve 04-zero1: {solved_at} (4 tries); its last check is not solved" in rep.text()
    assert "WRONG (4 tries)" in rep.text() and "first solved " + solved_at in rep.html()


# ---------------------------------------------------------------- a real kernel
def test_show_in_a_kernel_records_into_the_saved_notebook(tmp_path):
    from nbclient import NotebookClient
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(
        'from dltutor.grading import verdict\n'
        'verdict.wrong("04-zero1", "rank 1: x differs by 1e-3").show()'))
    NotebookClient(nb, kernel_name="python3", timeout=120,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / "dana" / "04_deepspeed_out_of_core_bert.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, str(path))
    texts = [o.get("text", "") for o in nb.cells[0].outputs]
    assert "wrong: rank 1: x differs by 1e-3\n" in texts
    rep = report.collect(tmp_path)
    assert rep.cell("dana", "04-zero1").status == "wrong"
    assert rep.cell("dana", "04-zero1").message == "rank 1: x differs by 1e-3"
    assert rep.cell("dana", "04-zero1").attempts >= 1       # the kernel's show() kept the try


# ---------------------------------------------------------------- the hand-out link
def test_gitpuller_link():
    link = gitpuller_link("https://hub.example.edu/", "https://git.example.edu/c/dltutor.git")
    url = urlparse(link)
    assert url.netloc == "hub.example.edu" and url.path == "/hub/user-redirect/git-pull"
    q = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert q == {"repo": "https://git.example.edu/c/dltutor.git", "branch": "main",
                 "targetpath": "dltutor",
                 "urlpath": "lab/tree/dltutor/course/notebooks/01_single_gpu_cifar10.ipynb"}
    assert (ROOT / "course/notebooks/01_single_gpu_cifar10.ipynb").is_file()
    local = gitpuller_link("http://127.0.0.1:8000", "/srv/course/", branch="spring",
                           notebook="course/notebooks/05_ring_allreduce_visualizer.ipynb")
    q = {k: v[0] for k, v in parse_qs(urlparse(local).query).items()}
    assert q["targetpath"] == "course" and q["branch"] == "spring"
    assert q["urlpath"] == "lab/tree/course/course/notebooks/05_ring_allreduce_visualizer.ipynb"
    with pytest.raises(ValueError):
        gitpuller_link("http://h", "", branch="main")


def test_report_module_runs_as_cli(classroom):
    r = subprocess.run([sys.executable, "-m", "dltutor", "report", str(classroom)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "bob 04-zero1: rank 1: exp_avg differs by 1e-3" in r.stdout
