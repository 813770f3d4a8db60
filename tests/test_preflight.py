"""`python -m dltutor preflight`: doctor, every notebook headless (papermill, course kernel), report.

Run here in fast mode on a small course folder (DLTUTOR_COURSE) whose labs are the real ones: one
notebook launches lab 02 on 2 ranks (after an unsolved exercise's self-check, which is meant to
raise), one fails in its second cell. The report must say which passed, give the launch's measured
numbers, and name the failing cell and its error.
"""
import json
import os
import subprocess
import sys
import time

import nbformat
import pytest

from dltutor import preflight

pytestmark = pytest.mark.slow


def _notebook(path, *cells, unsolved_exercise=False):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "dltutor", "display_name": "Python (dltutor)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.cells[0].metadata["tags"] = ["parameters"]
    if unsolved_exercise:  # a self-check that fails until the student solves it, as in the course
        check = nbformat.v4.new_code_cell("assert False, 'not solved yet'")
        check.metadata["tags"] = ["raises-exception"]
        nb.cells.insert(1, check)
    nbformat.write(nb, path)


def test_preflight_reports_passes_numbers_and_the_failing_cell(tmp_path, repo_root):
    course = tmp_path / "course"
    (course / "notebooks").mkdir(parents=True)
    (course / "labs").symlink_to(repo_root / "course" / "labs")
    _notebook(course / "notebooks" / "01_launch.ipynb", "NPROC = 2",
              "from dltutor.core import course\nfrom dltutor.launch.run import launch\n"
              "res = launch(course.lab('02_ddp/train.py'), nproc=NPROC, args=['--tiny'], timeout=300,"
              " echo=False)\nprint(res)", unsolved_exercise=True)
    _notebook(course / "notebooks" / "02_broken.ipynb", "X = 1", "X / 0")
    env = {**os.environ, "DLTUTOR_COURSE": str(course)}
    out = subprocess.run([sys.executable, "-m", "dltutor", "preflight", "--fast", "--out",
                          str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stdout + out.stderr          # a notebook failed
    report = next((tmp_path / "out").glob("preflight-*.md")).read_text()
    assert "| 01_launch | pass |" in report, report
    assert "| 02_broken | FAIL |" in report and "ZeroDivisionError" in report, report
    assert "train (world_size 2): img_per_s=" in report, report                  # lab 02's own numbers
    assert "mode: fast (DLTUTOR_FAST=1)" in report and "## What to fix" in report
    assert (tmp_path / "out" / "executed" / "02_broken.ipynb").is_file()
    assert list((tmp_path / "out" / "runs" / "01_launch").glob("*-train-*/rank1.log"))


def test_key_numbers_come_from_launches_during_the_notebook(tmp_path):
    old, new = tmp_path / "20250101-000000-train-aaaa", tmp_path / "20250101-000100-allreduce_bench-bbbb"
    for run, value in ((old, 1.0), (new, 2.5)):
        run.mkdir()
        record = {"rank": 0, "world_size": 2, "busbw_gbps": value, "note": "x", "ok": True}
        (run / "rank0.log").write_text("hello\nDLTUTOR_METRICS " + json.dumps(record) + "\n")
    since = time.time() - 5
    os.utime(old, (since - 100, since - 100))
    assert preflight.key_numbers(since, tmp_path) == ["allreduce_bench (world_size 2): busbw_gbps=2.5"]


def test_preflight_refuses_unknown_notebooks_and_sites():
    with pytest.raises(ValueError, match="no notebook starts with 99"):
        preflight.notebooks(["99"])
    out = subprocess.run([sys.executable, "-m", "dltutor", "preflight", "--site", "atlantis"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no site profile 'atlantis'" in out.stderr


def test_a_notebook_whose_launches_report_no_key_metric_is_not_called_launch_free(tmp_path):
    runs = tmp_path / "runs"
    for name in ("20250101-000000-faulty_train-aaaa", "20250101-000001-faulty_train-bbbb"):
        (runs / name).mkdir(parents=True)
        (runs / name / "rank0.log").write_text("a rank that failed on purpose\n")
    since = time.time() - 5
    assert preflight.key_numbers(since, runs) == [] and preflight.launch_count(since, runs) == 2
    run = preflight.NotebookRun("08_debugging", True, 1.0, [], launches=2)
    text = preflight.report([run], [], "local", fast=False)
    assert "(2 launch(es); none reported" in text and "no multi-rank launch" not in text
