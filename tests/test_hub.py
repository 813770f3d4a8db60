"""The course as a portal serves it: JupyterHub starts the student's JupyterLab as a Slurm job.

A TACC-like portal on the tests' one-node Slurm (tests/hub/: JupyterHub 6.1.1, batchspawner 1.3.0's
SlurmSpawner, npm's configurable-http-proxy; installed by `bash scripts/setup.sh --test` in a Python
environment of their own). The student logs in, the hub submits their server with sbatch, the
course kernel `dltutor` (installed with `python -m dltutor kernel install`, as the README says) is
listed although the server runs from the hub's Python, notebook 02 runs in fast mode on it with its
ranks inside the Jupyter job, the student stops the server, and nothing of the job is left.
"""
import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import requests

from dltutor.core.dist import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent / "hub"))
from client import Hub, login, run_cells  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "course/notebooks/02_ddp_multi_gpu.ipynb"
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


def _code_cells(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.timeout(1500)   # a whole notebook through a hub and a Slurm job on a busy machine
def test_notebook_02_through_a_jupyterhub_slurm_portal(slurm_cluster, tmp_path):
    hub_dir, user, password = _hub_install(), getpass.getuser(), "course-pw"
    data_dir = tmp_path / "jupyter-data"
    env = {**os.environ, "JUPYTER_DATA_DIR": str(data_dir), "HUB_STATE": str(tmp_path),
           "HUB_PORT": str(free_port()), "HUB_API_PORT": str(free_port()),
           "HUB_PROXY_API_PORT": str(free_port()), "HUB_USER": user, "HUB_PASSWORD": password,
           "HUB_SERVICE_TOKEN": os.urandom(16).hex(), "HUB_NOTEBOOK_DIR": str(ROOT),
           "HUB_PROXY": str(hub_dir / "npm/node_modules/.bin/configurable-http-proxy"),
           "HUB_SINGLEUSER": str(hub_dir / "venv/bin/jupyterhub-singleuser")}
    # The student's one step from the README: register the course kernel for themselves.
    subprocess.run([sys.executable, "-m", "dltutor", "kernel", "install"], env=env, check=True,
                   timeout=120, capture_output=True)
    hub = Hub(env, tmp_path, hub_dir / "venv/bin/python", tmp_path / "hub.log")
    job_name, job_id = f"jupyterhub-{user}", None
    try:
        hub.wait_up()
        login(hub, user, password)
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
        kernel_python = specs["kernelspecs"]["dltutor"]["spec"]["argv"][0]
        assert Path(kernel_python).resolve() == Path(sys.executable).resolve()

        session = requests.post(server + "api/sessions", headers=auth, timeout=120, json={
            "path": NOTEBOOK, "type": "notebook", "name": "", "kernel": {"name": "dltutor"}}).json()
        kernel_id = session["kernel"]["id"]
        probe = ("import os, sys, json\nfrom dltutor.core import dist\n"
                 "print(json.dumps({'job': os.environ.get('SLURM_JOB_ID'), 'prefix': sys.prefix,"
                 " 'launcher': dist.detect()['launcher'], 'rank': dist.detect()['rank']}))")
        seen = json.loads(run_cells(server, token, kernel_id, [probe])[0].strip().splitlines()[-1])
        assert seen["job"] == job_id, f"the kernel does not run inside the Jupyter job: {seen}"
        assert seen["launcher"] == "single" and seen["rank"] == 0, \
            f"the kernel took the job's SLURM_* variables for its own rank: {seen}"
        assert seen["prefix"] == sys.prefix != str(hub_dir / "venv"), seen   # the course's Python

        started = time.time()
        printed = "".join(run_cells(server, token, kernel_id, _code_cells(ROOT / NOTEBOOK),
                                    timeout=300))
        # the set-up installed Debian's Fashion-MNIST: real data, never the SYNTHETIC last resort
        assert "Fashion-MNIST" in printed and "SYNTHETIC" not in printed, printed[-2000:]
        # The notebook's launches logged each rank (dltutor.launch.run): a rank 1 of lab 02 ran.
        runs = ("from dltutor.core import env\n"
                f"print([p.name for p in env.runs_dir().glob('*-train-*') "
                f"if p.stat().st_mtime > {started} and (p / 'rank1.log').is_file()])")
        ran = run_cells(server, token, kernel_id, [runs])[0]
        assert "-train-" in ran, f"notebook 02 on the hub launched no 2-rank run of lab 02: {ran}"

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
