"""A class on one install: two students at once on the portal of tests/test_hub.py, in real browsers.

Two real Unix accounts, made by the test, share the suite's course environment and install, which
they can reach but not write (`accounts.reachable` lets them traverse the folders above it, as a
site's shared install is reachable). The hub (root) submits each student's JupyterLab as a Slurm job
of that student. The instructor hands out notebook 06 as an nbgrader assignment (dltutor.grading.
nbgrader, the exchange on this machine); each student fetches it from a kernel of their own server,
and in chromium (Playwright) both do the exercise "a Megatron MLP by hand" at the same time, one
with a wrong answer and one with the course's solution: the `%%writefile` goes to each one's own
folder (never "Overwriting" another's `tp_mlp.py`), each check runs each one's own ranks and gives
each their own verdict. They save and submit; the instructor collects and autogrades, and
nbgrader's scores agree, exercise by exercise, with `python -m dltutor report` over the students'
homes and over nbgrader's autograded copies, both of which list both students. Nothing of one student is in the
other's files, nothing is written into the shared environment, cache or course; the servers stop
and their jobs leave nothing behind.
"""
import csv
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

from dltutor.core.dist import free_port
from dltutor.core.env import cache_dir
from dltutor.grading import nbgrader as G
from dltutor.grading import nbgrader_steps as S
from dltutor.grading import report

sys.path.insert(0, str(Path(__file__).resolve().parent / "hub"))
import accounts  # noqa: E402
from browser import Student, chromium  # noqa: E402
from client import Hub, run_cells  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STUDENTS = ("dlt-ada", "dlt-alan")     # ada answers wrong, alan with the course's solution
PASSWORD = "class-pw"
EXERCISE = "06-tensor-parallel"
NOTEBOOK = "06_model_parallelism.ipynb"
ASSIGNMENT = G.assignment_name(NOTEBOOK)
WRONG = ROOT / "tests/answers/06-tensor-parallel/wrong_all_gather.py"
RIGHT = ROOT / "course/labs/06_model_parallel/solutions/tp_mlp.py"
ANSWER = "%%writefile {MY_TP}"                                 # the student's cell
CELLS = ["MY_TP = exercise_tp.work_file()", ANSWER, "exercise_tp.check(MY_TP)"]   # what they run
ARTIFACTS = ROOT / "test-artifacts"
pytestmark = pytest.mark.slow


def _hub_install() -> Path:
    hub = cache_dir() / "hub"
    if not (hub / ".stamp").is_file():
        pytest.fail(f"no test hub in {hub}: run `bash scripts/setup.sh --test`", pytrace=False)
    return hub


def _jobs(name: str) -> list[tuple[str, str]]:
    """(job id, user) of the queued or running jobs named `name`."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %u", "-n", name], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return [tuple(line.split()) for line in out.splitlines() if line.strip()]


def _files_of(root: Path, since: float) -> list[Path]:
    """Files under `root` changed since `since` (nothing is followed out of `root`)."""
    found = []
    for folder, dirs, files in os.walk(root):
        for name in files:
            p = Path(folder) / name
            try:
                if p.lstat().st_mtime >= since:
                    found.append(p)
            except OSError:
                pass
    return found


def _owners(root: Path) -> set[str]:
    owners = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            try:
                owners.add(pwd.getpwuid((Path(folder) / name).lstat().st_uid).pw_name)
            except (KeyError, OSError):
                owners.add("?")
    return owners


def _answer_cell(answer: Path) -> str:
    """The `%%writefile` cell with `answer` as the student types it (no test headers)."""
    lines = [line for line in answer.read_text().splitlines(keepends=True)
             if not line.startswith(("# expect:", "# names:", "# why:", "# from:"))]
    return ANSWER + "\n" + "".join(lines)


@pytest.mark.timeout(1500)
def test_two_students_on_one_install_each_with_their_own_files_and_verdicts(slurm_cluster,
                                                                             tmp_path):
    hub_dir = _hub_install()
    started = time.time()
    room = Path(tempfile.mkdtemp(prefix="dltutor-class-"))   # homes the students can reach
    os.chmod(room, 0o711)
    shared = [Path(sys.prefix), cache_dir(), ROOT / "course"]
    try:
        with accounts.reachable([sys.base_prefix, sys.prefix, cache_dir(), hub_dir, ROOT, room]), \
                accounts.students(STUDENTS, room / "homes") as homes:
            _class(hub_dir, homes, room, tmp_path, slurm_cluster, shared, started)
    finally:
        shutil.rmtree(room, ignore_errors=True)


def _class(hub_dir, homes, room, tmp_path, slurm_conf, shared, started):
    # The shared environment, cache and course: reachable, not writable, by each student.
    for name in STUDENTS:
        for folder in shared:
            r = accounts.as_user(name, ["touch", str(folder / f".{name}-was-here")])
            assert r.returncode != 0, f"{name} could write into the shared {folder}"
        r = accounts.as_user(name, [sys.executable, "-m", "dltutor", "kernel", "install"])
        assert r.returncode == 0, f"{name}'s `python -m dltutor kernel install`: {r.stderr[-2000:]}"

    env = {**os.environ, "HUB_STATE": str(tmp_path), "HUB_PORT": str(free_port()),
           "HUB_API_PORT": str(free_port()), "HUB_PROXY_API_PORT": str(free_port()),
           "HUB_USER": STUDENTS[0], "HUB_USERS": ",".join(STUDENTS), "HUB_PASSWORD": PASSWORD,
           "HUB_HOMES": str(room / "homes"), "HUB_AS_USERS": "1", "HUB_EXPOSE_APP": "1",
           "HUB_SERVICE_TOKEN": os.urandom(16).hex(),
           "HUB_PROXY": str(hub_dir / "npm/node_modules/.bin/configurable-http-proxy"),
           "HUB_SINGLEUSER": str(hub_dir / "venv/bin/jupyterhub-singleuser"),
           "HUB_SLURM_HOSTS": str(Path(slurm_conf).parent / "hosts")}
    hub = Hub(env, tmp_path, hub_dir / "venv/bin/python", tmp_path / "hub.log")
    try:
        hub.wait_up()
        for name in STUDENTS:                              # both servers asked for at once
            hub.call("POST", f"/users/{name}/server")
        for name in STUDENTS:
            hub.wait_server(name, ready=True)
            jobs = _jobs(f"jupyterhub-{name}")
            assert [user for _, user in jobs] == [name], \
                f"{name}'s server should be one Slurm job of {name}'s: squeue shows {jobs}"
        tokens = {n: hub.call("POST", f"/users/{n}/tokens", json={"note": "test"})["token"]
                  for n in STUDENTS}
        course = G.make_course(room / "grading", ROOT / "course", exchange=room / "exchange",
                               notebooks=[NOTEBOOK[:2]])
        instructor = S.Instructor(course)
        instructor.release(ASSIGNMENT)
        for name in STUDENTS:                              # from a kernel of their own server
            _as_student_on_hub(hub, name, tokens[name], "fetch", course.exchange)
        outputs = _exercise_in_browsers(hub, f"{ASSIGNMENT}/{NOTEBOOK}")
        _check_outputs(homes, outputs)
        for name in STUDENTS:
            _as_student_on_hub(hub, name, tokens[name], "submit", course.exchange)
        instructor.collect(ASSIGNMENT)
        instructor.autograde(ASSIGNMENT)
        _check_grades(homes, room / "grading", instructor.scores(ASSIGNMENT), tmp_path)
        _check_isolation(homes, shared, started)
    finally:
        for name in STUDENTS:
            try:
                hub.call("DELETE", f"/users/{name}/server")
            except RuntimeError:
                pass
        for name in STUDENTS:
            deadline = time.monotonic() + 90
            while _jobs(f"jupyterhub-{name}") and time.monotonic() < deadline:
                time.sleep(1)
        left = {n: _jobs(f"jupyterhub-{n}") for n in STUDENTS}
        hub.stop()
        for name, jobs in left.items():
            for job_id, _ in jobs:
                subprocess.run(["scancel", job_id], timeout=30)
    assert not any(left.values()), f"stopped servers' Slurm jobs still queued: {left}"


def _as_student_on_hub(hub, name, token, step, exchange) -> None:
    """The student's nbgrader step (`fetch` or `submit`, dltutor.grading.nbgrader_steps), run in a
    kernel of their server (their Slurm job, their uid) in their home."""
    server = f"{hub.url}/user/{name}/"
    auth = {"Authorization": f"token {token}"}
    kernel = requests.post(server + "api/kernels", headers=auth, json={"name": "dltutor"},
                           timeout=120).json()["id"]
    try:
        code = ("import os\nfrom dltutor.grading import nbgrader_steps as S\n"
                f"S.{step}({ASSIGNMENT!r}, os.path.expanduser('~'), {str(exchange)!r})\n"
                "print(os.getuid(), os.path.expanduser('~'))")
        said = run_cells(server, token, kernel, [code], timeout=300)[0].split()
        assert said[-2:] == [str(pwd.getpwnam(name).pw_uid), pwd.getpwnam(name).pw_dir], said
    finally:
        requests.delete(server + f"api/kernels/{kernel}", headers=auth, timeout=60)


def _exercise_in_browsers(hub, path: str) -> dict:
    """Both students open their fetched notebook in chromium, type their answer, and run the
    exercise's cells at the same time; each one's outputs of those cells, once saved."""
    from playwright.sync_api import sync_playwright
    answers = {STUDENTS[0]: WRONG, STUDENTS[1]: RIGHT}
    outputs = {}
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = chromium(pw)
        try:
            students = {n: Student(browser, hub.url, n, PASSWORD) for n in STUDENTS}
            for n, s in students.items():
                s.open(path)
                s.type_into(ANSWER, _answer_cell(answers[n]))
            for s in students.values():          # both run the exercise at the same time
                s.start(CELLS)
            for n, s in students.items():
                state = s.wait()
                s.screenshot(ARTIFACTS / f"class-{n}.png")
                outputs[n] = {c: s.output(c) for c in CELLS}
                outputs[n]["state"] = state
                s.save()
        finally:
            browser.close()
    return outputs


def _check_outputs(homes, outputs) -> None:
    for name, out in outputs.items():
        written = out[ANSWER]
        assert written.startswith("Writing ") and str(homes[name]) in written, \
            f"{name}'s answer did not go to a new file in their own folder: {written!r}"
    wrong, right = (outputs[n] for n in STUDENTS)
    check = CELLS[-1]
    # the assignment's check cell is nbgrader's test: it raises unless the check passed
    assert wrong["state"].startswith("error in cell") and "wrong:" in wrong[check], wrong
    assert "AssertionError" in wrong[check], wrong[check][-1500:]
    assert right["state"] == "done" and "passed:" in right[check], right


def _rows(folder: Path) -> dict:
    rep = report.collect(folder)
    return rep, {(s, e): rep.cell(s, e).status for s in rep.students for e in rep.exercises}


def _check_grades(homes, grading: Path, scores: dict, tmp_path) -> None:
    """nbgrader's scores, the report over the homes and over the autograded copies: one verdict."""
    wrong, right = STUDENTS
    exercises = sorted(scores[right])
    assert set(scores) == set(STUDENTS) and EXERCISE in exercises, scores
    assert scores[wrong][EXERCISE][0] == 0 < scores[right][EXERCISE][0] == scores[right][EXERCISE][1]
    r = subprocess.run([sys.executable, "-m", "dltutor", "report", str(homes[wrong].parent),
                        "--csv", str(tmp_path / "report.csv")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    with (tmp_path / "report.csv").open() as f:
        rows = {(row["student"], row["exercise"]): row for row in csv.DictReader(f)}
    assert rows[(wrong, EXERCISE)]["status"] == "wrong", rows
    assert rows[(right, EXERCISE)]["status"] == "solved", rows
    assert int(rows[(right, EXERCISE)]["attempts"]) == 1, rows[(right, EXERCISE)]   # their own try
    rep, graded = _rows(grading / "autograded")
    assert rep.students == sorted(STUDENTS), rep.students
    solved = S.verdicts(scores)
    for student in STUDENTS:
        for ex in exercises:
            assert (graded[(student, ex)] == "solved") == solved[student][ex], \
                (student, ex, graded[(student, ex)], scores[student][ex])
        assert graded[(student, EXERCISE)] == rows[(student, EXERCISE)]["status"], student


def _check_isolation(homes, shared, started) -> None:
    for name, home in homes.items():
        assert _owners(home) <= {name}, f"files of others in {name}'s home: {_owners(home)}"
    for folder in shared:
        new = [p for p in _files_of(folder, started)
               if pwd.getpwuid(p.lstat().st_uid).pw_name in STUDENTS]
        assert not new, f"students wrote into the shared {folder}: {new[:5]}"
