"""`make gpu-check --streams N --measure ladder --deadline S` (scripts/gpu_streams.py): the plan,
the children, the deadline and the one record, on this GPU-less machine with stand-in children
(a child here would only say that there is no GPU) and a stand-in measurement."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from dltutor.core.course import course_root

SCRIPTS = course_root().parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import gpu_check  # noqa: E402
import gpu_record  # noqa: E402
import gpu_streams  # noqa: E402
from gpu_record import Result  # noqa: E402

INFO = dict(host="gpu-node-9", date="2026-11-27T14:00+00:00", python="3.12.3",
            python_path="/usr/bin/python3", torch="2.11.0+cu130", cuda="13.0", gpus=1,
            gpu_names=["NVIDIA H200"], capability="9.0", nccl="2.28.9", driver="580.1",
            torchvision="0.26.0", deepspeed=None, horovod=None, papermill="2.7.0",
            nbclient="0.11.0", ipykernel="7.4.0")


def test_the_plan_puts_the_longest_first_and_every_name_once():
    minutes = {"a": 4.0, "b": 3.0, "c": 2.0, "d": 1.0, "e": 1.0}
    plan = gpu_streams.plan_streams(list("edcba"), 2, minutes)
    assert sorted(sum(plan, [])) == list("abcde") and plan[0][0] == "a" and plan[1][0] == "b"
    loads = [sum(minutes[n] for n in s) for s in plan]
    assert max(loads) - min(loads) <= 1.0                       # 5.0 and 6.0
    assert gpu_streams.plan_streams(["x", "y"], 5, {}) == [["x"], ["y"]]   # no empty streams


def test_the_only_pattern_names_exactly_the_streams_jobs():
    import re
    rx = re.compile(gpu_streams.only_regex(["04_deepspeed/train_bert_ds.py zero3", "01_a"]))
    assert rx.search("04_deepspeed/train_bert_ds.py zero3") and rx.search("01_a")
    assert not rx.search("04_deepspeed/train_bert_ds.py zero1") and not rx.search("01_ab")


def test_past_minutes_come_from_passing_rows(tmp_path):
    gpu_record.write_record(INFO, [Result("01_x", "notebook", "pass", 2.5),
                                   Result("02_y", "notebook", "fail", 9.0)], tmp_path)
    assert gpu_streams.past_minutes(tmp_path) == {"01_x": 2.5}


CHILD = textwrap.dedent("""
    import sys, time, os, subprocess
    sys.path.insert(0, {scripts!r})
    from gpu_record import Result, write_record
    names, out, mode = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    info = {info!r}
    if mode == "crash":
        sys.exit(3)
    rows = []
    for name in names:
        rows.append(Result(name, "lab" if "/" in name else "notebook", "pass", 0.01))
        write_record(info, rows, __import__("pathlib").Path(out))   # after every row
        if mode == "hang":
            open(out + "/grandchild.pid", "w").write(str(subprocess.Popen(
                ["sleep", "300"]).pid))
            time.sleep(300)
""")


def _child(tmp_path, names, out, mode):
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(scripts=str(SCRIPTS), info=INFO))
    out.mkdir(parents=True, exist_ok=True)
    return [sys.executable, str(script), ",".join(names), str(out), mode]


def test_children_run_side_by_side_and_a_stopped_one_leaves_nothing_running(tmp_path):
    plan = [["01_a", "02_b"], ["03/c.py", "04_d"], ["05_e"]]
    outs = [tmp_path / f"s{k}" for k in range(3)]
    cmds = [_child(tmp_path, plan[0], outs[0], "ok"), _child(tmp_path, plan[1], outs[1], "hang"),
            _child(tmp_path, plan[2], outs[2], "crash")]
    started = time.monotonic()
    codes = gpu_streams.run_children(cmds, 8.0, tmp_path / "logs")
    assert time.monotonic() - started < 60 and codes[0] == 0 and codes[1] is None and codes[2] == 3
    grandchild = int((outs[1] / "grandchild.pid").read_text())
    time.sleep(0.5)
    assert not os.path.exists(f"/proc/{grandchild}") or \
        open(f"/proc/{grandchild}/stat").read().split()[2] == "Z"   # its group was stopped
    rows = {r.name: r for r in gpu_streams.stream_results(plan, outs, codes, Result,
                                                          gpu_record.load)}
    assert [rows[n].status for n in ("01_a", "02_b", "03/c.py")] == ["pass"] * 3  # written before
    assert rows["04_d"].status.startswith("not run: unfinished") and rows["04_d"].kind == "notebook"
    assert rows["05_e"].status == "fail" and "exited 3" in rows["05_e"].detail


def test_one_check_in_streams_writes_one_record_with_every_row(tmp_path, monkeypatch):
    books = tmp_path / "notebooks"
    books.mkdir()
    for stem in ("01_one", "02_two", "03_three"):
        (books / f"{stem}.ipynb").write_text("{}")
    jobs = [gpu_check.Job(n, tmp_path / "x.py", [], 1) for n in ("01_lab/a.py", "02_lab/b.py")]
    monkeypatch.setattr(gpu_check, "no_gpu_line", lambda *a: None)
    monkeypatch.setattr(gpu_check, "facts", lambda: dict(INFO))
    monkeypatch.setattr(gpu_check, "lab_jobs", lambda gpus: jobs)
    monkeypatch.setattr(gpu_check, "course_dir", lambda name: books)
    seen = []

    def child(names, out, left, timeout, extra=()):
        seen.append((names, left))
        return _child(tmp_path, names, out, "ok")
    monkeypatch.setattr(gpu_streams, "child_command", child)
    out = tmp_path / "record"
    assert gpu_check.main(["--streams", "2", "--out", str(out), "--no-readme",
                           "--deadline", "120"]) == 0
    assert len(seen) == 2 and all(0 < left <= 120 for _, left in seen)
    assert len(list(out.glob("*.json"))) == 1
    _, results = gpu_record.load(next(out.glob("*.json")))
    assert sorted(r.name for r in results) == sorted(
        ["01_lab/a.py", "02_lab/b.py", "01_one", "02_two", "03_three"])
    assert all(r.status == "pass" for r in results)


def test_nothing_starts_after_the_deadline(tmp_path, monkeypatch):
    jobs = [gpu_check.Job("01_lab/a.py", tmp_path / "x.py", [], 1)]
    monkeypatch.setattr(gpu_check, "lab_jobs", lambda gpus: jobs)
    ran = []
    monkeypatch.setattr(gpu_check, "run_lab", lambda job, *a: ran.append(job) or Result(
        job.name, "lab", "pass"))
    args = gpu_check.argparse.Namespace(notebooks_only=False, labs_only=True, deadline=5,
                                        timeout=10, kernel=None)
    rows = gpu_check.checked(args, INFO, lambda n: True, tmp_path, time.monotonic() - 1)
    assert not ran and rows[0].status.startswith("not run: the check's deadline (5 s) passed")
    rows = gpu_check.checked(args, INFO, lambda n: True, tmp_path, time.monotonic() + 60)
    assert ran and rows[0].status == "pass"


BENCH = textwrap.dedent("""
    import json, os, sys
    out = sys.argv[sys.argv.index("--json") + 1]
    if "--fail" in sys.argv:
        print("the bench broke: no GPU memory"); sys.exit(2)
    json.dump({"bench": "fake", "cpus": sorted(os.sched_getaffinity(0))}, open(out, "w"))
""")


def test_a_measurement_runs_alone_on_the_cores_given_and_a_broken_one_is_a_failed_row(
        tmp_path, monkeypatch):
    bench = tmp_path / "bench.py"
    bench.write_text(BENCH)
    monkeypatch.setitem(gpu_streams.MEASUREMENTS, "fake", [str(bench)])
    monkeypatch.setitem(gpu_streams.MEASUREMENTS, "broken", [str(bench), "--fail"])
    found, rows = gpu_streams.measure(["fake", "broken"], tmp_path, 60,
                                      cpus=gpu_streams.cpu_list("0"))
    assert found == [{"bench": "fake", "cpus": [0]}]
    assert [r.status for r in rows] == ["pass", "fail"] and rows[0].kind == "measurement"
    assert "exit 2" in rows[1].detail and "no GPU memory" in rows[1].detail
    with pytest.raises(SystemExit, match="no measurement 'nope'; known: ladder"):
        gpu_streams.measure(["nope"], tmp_path, 60)


def test_cpu_lists_and_waiting_for_a_build():
    assert gpu_streams.cpu_list("0-3,8") == {0, 1, 2, 3, 8} and gpu_streams.cpu_list(None) is None
    quick = subprocess.Popen(["sleep", "0.3"])
    assert gpu_streams.wait_for_pid(quick.pid, time.monotonic() + 30, poll=0.1) is True
    quick.wait()
    slow = subprocess.Popen(["sleep", "30"])
    try:
        assert gpu_streams.wait_for_pid(slow.pid, time.monotonic() + 0.3, poll=0.1) is False
    finally:
        slow.kill()
        slow.wait()


def test_a_failed_notebook_row_names_the_cells_own_error(tmp_path):
    class CellFailed(Exception):
        ename, evalue, exec_count = "LaunchError", "rank 0 failed (launcher exit code 1).\nmore", 9
    assert gpu_check.failure_detail(CellFailed("----- papermill's banner")) == (
        "cell In [9]: LaunchError: rank 0 failed (launcher exit code 1). more")
    assert gpu_check.failure_detail(TimeoutError("cell\ntimed out")) == "TimeoutError: cell timed out"
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1", execution_count=1),
                                         nbformat.v4.new_code_cell("x", execution_count=2)])
    nb.cells[1].outputs = [nbformat.v4.new_output("error", ename="LaunchError",
                                                  evalue="rank 0 failed", traceback=[])]
    path = tmp_path / "04_x.ipynb"
    nbformat.write(nb, path)
    row = gpu_record.notebook_result(path)
    assert row.status == "fail" and "1 error(s): LaunchError: rank 0 failed (read from" in row.detail


def test_versions_are_read_again_after_waiting_for_a_build(tmp_path, monkeypatch):
    """Check 2 of the H200 record read its versions while Horovod was still building: its record
    said 'not installed' beside Horovod rows that passed."""
    monkeypatch.setattr(gpu_check, "no_gpu_line", lambda *a: None)
    monkeypatch.setattr(gpu_check, "facts", lambda: dict(INFO))
    monkeypatch.setattr(gpu_check, "lab_jobs", lambda gpus: [])
    monkeypatch.setattr(gpu_check, "course_dir", lambda name: tmp_path)
    build = subprocess.Popen(["sleep", "0.5"])
    built = {"horovod": None}

    def waited(pid, deadline, poll=2.0):
        build.wait()
        built["horovod"] = "0.28.1+torch2.11.0.cu130.nccl"
        return True
    monkeypatch.setattr(gpu_streams, "wait_for_pid", waited)
    monkeypatch.setattr(gpu_check, "version", lambda name: built.get(name, "1.0"))
    out = tmp_path / "record"
    assert gpu_check.main(["--out", str(out), "--no-readme", "--wait-pid", str(build.pid),
                           "--labs-only"]) == 0
    facts, _ = gpu_record.load(next(out.glob("*.json")))
    assert facts["horovod"] == "0.28.1+torch2.11.0.cu130.nccl"
