"""The course as a portal serves it: JupyterHub starts the student's JupyterLab as a Slurm job.

A TACC-like portal on the tests' two-node Slurm (tests/hub/: JupyterHub 6.1.1, batchspawner 1.3.0's
SlurmSpawner, npm's configurable-http-proxy; installed by `bash scripts/setup.sh --test` in a Python
environment of their own). The server's job runs on node1 or node2, names the hub resolves through
the cluster's hosts file as a portal's DNS would (HUB_SLURM_HOSTS). The student logs in, the hub submits their server with sbatch, the
course kernel `dltutor` (installed with `python -m dltutor kernel install`, as the README says) is
listed although the server runs from the hub's Python. The instructor hands the course out with an
nbgitpuller link (`dltutor.grading.handout`, nbgitpuller installed beside the hub's JupyterLab) to
a snapshot of this working tree in a local git repository: following it puts the course into the
student's home (the server's root) and lands on notebook 01. Notebook 02 runs in fast mode from
the pulled copy, launching that copy's labs (and saying so), with its ranks inside the Jupyter job, and its section 5 submits a job of its own
across both nodes and says, from that job's output, that it ran on node1 and node2; its exercise
check records "not yet", then
"passed" once the student's script is the solution; JupyterLab's save (the contents API) keeps the
outputs, and `python -m dltutor report` over the homes lists the user's exercise with its status.
The student stops the server, and nothing of the job is left.
"""
import csv
import getpass
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import requests

from dltutor.core.dist import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent / "hub"))
from client import Hub, execute, follow_gitpuller, login, run_cells, text_of  # noqa: E402

from dltutor.grading.handout import FIRST_NOTEBOOK, gitpuller_link  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "course/notebooks/02_ddp_multi_gpu.ipynb"
CHECK_CELL = "exercise_check.check(MY_DDP)"      # notebook 02's exercise check
pytestmark = pytest.mark.slow


def _hub_install() -> Path:
    from dltutor.core.env import cache_dir
    hub = cache_dir() / "hub"   # where scripts/setup.sh --test built it (DLTUTOR_CACHE or recorded)
    if not (hub / ".stamp").is_file():
        pytest.fail(f"no test hub in {hub}: run `bash scripts/setup.sh --test`", pytrace=False)
    return hub


def _job_processes(job_id: str) -> list[str]:
    """Processes (pid and command) whose environment says they belong to Slurm job `job_id`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = proc.joinpath("environ").read_bytes().split(b"\0")
            cmd = proc.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except OSError:
            continue
        if f"SLURM_JOB_ID={job_id}".encode() in env:
            found.append(f"{proc.name} {cmd}")
    return found


def _jobs(name: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i", "-n", name], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    return out.split()


def _snapshot_repo(dest: Path) -> Path:
    """A bare git repository whose one commit (branch main) is this working tree as it is now:
    tracked and untracked files, less what .gitignore ignores; the repository the link hands out."""
    git = ["git", "-c", "user.name=instructor", "-c", "user.email=instructor@example.edu",
           f"--git-dir={dest}", f"--work-tree={ROOT}"]
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(dest)], check=True, timeout=60)
    for step in (["add", "-A", "."], ["commit", "-q", "-m", "the course as handed out"]):
        subprocess.run(git + step, cwd=ROOT, check=True, timeout=120, capture_output=True)
    return dest


def _save(server: str, auth: dict, path: str, nb) -> None:
    """Save `nb` at `path` as JupyterLab's save does (PUT to the contents API)."""
    r = requests.put(server + f"api/contents/{path}", headers=auth, timeout=60,
                     json={"type": "notebook", "format": "json", "content": nb})
    assert r.status_code in (200, 201), f"saving {path}: {r.status_code} {r.text[:300]}"


def _report(homes: Path, out: Path) -> dict:
    """The instructor's `python -m dltutor report` over the homes: {(student, exercise): row}."""
    r = subprocess.run([sys.executable, "-m", "dltutor", "report", str(homes), "--csv", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    with out.open() as f:
        return {(row["student"], row["exercise"]): row for row in csv.DictReader(f)}


@pytest.mark.timeout(1500)   # a whole notebook through a hub and a Slurm job on a busy machine
def test_notebook_02_through_a_jupyterhub_slurm_portal(slurm_cluster, tmp_path):
    hub_dir, user, password = _hub_install(), getpass.getuser(), "course-pw"
    data_dir = tmp_path / "jupyter-data"
    homes = tmp_path / "homes"          # the student's home of their own: the server's root
    home = homes / user
    home.mkdir(parents=True)
    repo = _snapshot_repo(tmp_path / "dltutor.git")
    env = {**os.environ, "JUPYTER_DATA_DIR": str(data_dir), "HUB_STATE": str(tmp_path),
           "HUB_PORT": str(free_port()), "HUB_API_PORT": str(free_port()),
           "HUB_PROXY_API_PORT": str(free_port()), "HUB_USER": user, "HUB_PASSWORD": password,
           "HUB_SERVICE_TOKEN": os.urandom(16).hex(), "HUB_NOTEBOOK_DIR": str(home),
           "HUB_PROXY": str(hub_dir / "npm/node_modules/.bin/configurable-http-proxy"),
           "HUB_SINGLEUSER": str(hub_dir / "venv/bin/jupyterhub-singleuser"),
           "HUB_SLURM_HOSTS": str(Path(slurm_cluster).parent / "hosts")}   # the cluster's "DNS"
    # The student's one step from the README: register the course kernel for themselves.
    subprocess.run([sys.executable, "-m", "dltutor", "kernel", "install"], env=env, check=True,
                   timeout=120, capture_output=True)
    hub = Hub(env, tmp_path, hub_dir / "venv/bin/python", tmp_path / "hub.log")
    job_name, job_id = f"jupyterhub-{user}", None
    try:
        hub.wait_up()
        browser = login(hub, user, password)
        with pytest.raises(RuntimeError, match="login failed"):
            login(hub, user, "wrong")
        hub.call("POST", f"/users/{user}/server")
        hub.wait_server(user, ready=True)
        jobs = _jobs(job_name)
        assert len(jobs) == 1, f"the server should be one Slurm job, squeue shows {jobs}"
        job_id = jobs[0]
        token = hub.call("POST", f"/users/{user}/tokens", json={"note": "test"})["token"]
        server = f"{hub.url}/user/{user}/"
        auth = {"Authorization": f"token {token}"}

        specs = requests.get(server + "api/kernelspecs", headers=auth, timeout=30).json()
        assert "dltutor" in specs["kernelspecs"], f"course kernel not listed: {list(specs['kernelspecs'])}"
        kernel_spec = specs["kernelspecs"]["dltutor"]["spec"]
        assert Path(kernel_spec["argv"][0]).resolve() == Path(sys.executable).resolve()

        # The instructor's link: the course lands in the student's home, notebook 01 opens.
        link = gitpuller_link(hub.url, repo.as_uri(), branch="main")
        landing, synced = follow_gitpuller(browser, link)
        pulled = home / "dltutor"
        assert (pulled / FIRST_NOTEBOOK).is_file() and (pulled / NOTEBOOK).is_file(), \
            f"the link did not put the course into {home}: {sorted(os.listdir(home))}\n{synced[-5:]}"
        assert landing.ok and landing.url == f"{server}lab/tree/dltutor/{FIRST_NOTEBOOK}", \
            (landing.status_code, landing.url)
        mine = f"dltutor/{NOTEBOOK}"     # the student's copy, relative to the server's root

        session = requests.post(server + "api/sessions", headers=auth, timeout=120, json={
            "path": mine, "type": "notebook", "name": "", "kernel": {"name": "dltutor"}}).json()
        kernel_id = session["kernel"]["id"]
        probe = ("import os, sys, json\nfrom dltutor.core import course, dist\n"
                 "print(json.dumps({'job': os.environ.get('SLURM_JOB_ID'), 'prefix': sys.prefix,"
                 " 'launcher': dist.detect()['launcher'], 'rank': dist.detect()['rank'],"
                 " 'cwd': os.getcwd(), 'course': str(course.course_root()),"
                 " 'lab': str(course.lab('02_ddp/train.py'))}))")
        seen = json.loads(run_cells(server, token, kernel_id, [probe])[0].strip().splitlines()[-1])
        assert seen["job"] == job_id, f"the kernel does not run inside the Jupyter job: {seen}"
        assert seen["launcher"] == "single" and seen["rank"] == 0, \
            f"the kernel took the job's SLURM_* variables for its own rank: {seen}"
        assert seen["prefix"] == sys.prefix != str(hub_dir / "venv"), seen   # the course's Python
        # The pulled notebook runs where it lies, and the labs it launches are those of the
        # student's copy beside it, not the install's that the kernel's DLTUTOR_COURSE names.
        assert Path(seen["cwd"]).resolve() == (pulled / NOTEBOOK).parent.resolve(), seen
        assert Path(seen["course"]).resolve() == (pulled / "course").resolve() \
            != Path(kernel_spec["env"]["DLTUTOR_COURSE"]).resolve(), (seen, kernel_spec["env"])
        assert Path(seen["lab"]).resolve() == (pulled / "course/labs/02_ddp/train.py").resolve(), seen

        started = time.time()
        nb = nbformat.read(pulled / NOTEBOOK, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        outputs = execute(server, token, kernel_id, [c.source for c in code], timeout=300)
        printed = "".join(text_of(o) for o in outputs)
        # the set-up installed Debian's Fashion-MNIST: real data, never the SYNTHETIC last resort
        assert "Fashion-MNIST" in printed and "SYNTHETIC" not in printed, printed[-2000:]
        # the cells that launch a lab say it comes from the student's copy
        assert f"lab 02_ddp/train.py from your copy {(pulled / 'course').resolve()}" in printed, \
            re.findall(r"\[launch\].*", printed)[:3]
        # The notebook's launches logged each rank (dltutor.launch.run): a rank 1 of lab 02 ran.
        runs = ("from dltutor.core import env\n"
                f"print([p.name for p in env.runs_dir().glob('*-train-*') "
                f"if p.stat().st_mtime > {started} and (p / 'rank1.log').is_file()])")
        ran = run_cells(server, token, kernel_id, [runs])[0]
        assert "-train-" in ran, f"notebook 02 on the hub launched no 2-rank run of lab 02: {ran}"
        # Section 5 from the Jupyter job: a 2-node job of lab 02, where its own ranks say they ran.
        where = re.findall(r"job \d+: COMPLETED in [\d.]+ s; ran on (\d) node\(s\): (.*)", printed)
        assert where and where[0][0] == "2" and all(f"node{i} [" in where[0][1] for i in (1, 2)), \
            f"section 5 did not run on both nodes: {where or printed[-3000:]}"

        # The student saves (the outputs carry the check's record); the instructor's report.
        for cell, out in zip(code, outputs):
            cell.outputs, cell.execution_count = [nbformat.from_dict(o) for o in out], None
        _save(server, auth, mine, nb)
        row = _report(homes, tmp_path / "report.csv")[(user, "02-ddp")]
        assert row["status"] == "not yet" and row["notebook"] == mine, row   # the skeleton
        # The student's script becomes right: the check cell again, saved, reported solved.
        [check] = [c for c in code if CHECK_CELL in c.source]
        answer = ("import shutil\nfrom dltutor.core import course\n"
                  "shutil.copy(course.lab('02_ddp/solutions/exercise_ddp.py'), MY_DDP)")
        check.outputs = [nbformat.from_dict(o) for o in
                         execute(server, token, kernel_id, [answer, check.source], timeout=300)[1]]
        _save(server, auth, mine, nb)
        row = _report(homes, tmp_path / "report.csv")[(user, "02-ddp")]
        assert row["status"] == "solved", (row, text_of(check.outputs))
        assert int(row["attempts"]) >= 1 and row["first_solved"], row     # the tries, kept

        hub.call("DELETE", f"/users/{user}/server")
        hub.wait_server(user, ready=False, timeout=120)
        deadline = time.monotonic() + 60
        while _jobs(job_name) and time.monotonic() < deadline:
            time.sleep(1)
        assert not _jobs(job_name), "the stopped server's Slurm job is still in the queue"
        deadline = time.monotonic() + 15
        while _job_processes(job_id) and time.monotonic() < deadline:
            time.sleep(1)
        assert not _job_processes(job_id), f"left behind: {_job_processes(job_id)}"
    finally:
        hub.stop()
        for leftover in _jobs(job_name):
            subprocess.run(["scancel", leftover], timeout=30)
