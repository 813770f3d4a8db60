"""Slurm for real: a one-node Slurm on this host (scripts/slurm_local.sh), jobs through sbatch and srun.

The session fixture starts slurmctld + slurmd (and munged if needed) and stops at the end only what
it started. Slurm missing is a failure, not a skip: `bash scripts/setup.sh --test` installs it.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dltutor.launch import sites
from dltutor.launch import slurm
from conftest import _cluster

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "tests" / "scripts" / "slurm_allreduce.py"
JOB_TIMEOUT = 300   # a 2-rank job imports torch twice: slow on a busy 2-core CI machine


def _check_two_ranks(metrics):
    assert [m["rank"] for m in metrics] == [0, 1], metrics
    assert all(m["world_size"] == 2 and m["total"] == 3.0 for m in metrics), metrics  # 1 + 2


# ---- against the real local Slurm ---------------------------------------------------------------

def test_cluster_start_is_idempotent(slurm_cluster):
    r = _cluster("start")
    assert r.returncode == 0 and "already running" in r.stdout, r.stdout + r.stderr
    assert _cluster("status").returncode == 0
    assert subprocess.run(["sinfo", "-h", "-o", "%P %T"], capture_output=True, text=True,
                          timeout=30).stdout.split() in (["debug*", "idle"], ["debug*", "mixed"])


def test_sbatch_two_tasks_submit_poll_and_parse_output_file(slurm_cluster, tmp_path):
    text = sites.render_job("local", LAB, nodes=1, tasks_per_node=2, output="%x-%j.out",
                            job_name="allreduce")
    job_id = slurm.submit(text, tmp_path, "allreduce")
    assert (tmp_path / "allreduce.sbatch").read_text() == text
    state, code = slurm.poll(job_id, timeout=JOB_TIMEOUT)
    output = (tmp_path / f"allreduce-{job_id}.out").read_text()
    assert (state, code) == ("COMPLETED", "0:0"), output
    metrics = slurm.parse_metrics(output)
    _check_two_ranks(metrics)
    assert {m["launcher"] for m in metrics} == {"slurm"} and {m["job"] for m in metrics} == {job_id}
    assert {m["local_rank"] for m in metrics} == {0, 1}
    assert re.search(r"^0: DLTUTOR_METRICS", output, re.M) and re.search(r"^1: ", output, re.M)


def test_multi_node_template_runs_torchrun_per_node(slurm_cluster, tmp_path):
    """The multi-node template (MASTER_ADDR from scontrol show hostnames) with one torchrun per node."""
    site = dict(sites.load_site("local"), template="slurm/multi_node.sbatch.tmpl")
    text = sites.render_job(site, LAB, nodes=1, tasks_per_node=2, launcher="torchrun",
                            job_name="torchrun")
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1' in text
    job_id = slurm.submit(text, tmp_path, "torchrun")
    state, _ = slurm.poll(job_id, timeout=JOB_TIMEOUT)
    output = (tmp_path / f"torchrun-{job_id}.out").read_text()
    assert state == "COMPLETED", output
    metrics = slurm.parse_metrics(output)
    _check_two_ranks(metrics)
    assert {m["launcher"] for m in metrics} == {"torchrun"}, metrics
    nodelist = re.search(r"^job \d+ on (\S+):", output, re.M).group(1)
    host = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                          text=True, timeout=30).stdout.split()[0]
    assert f"MASTER_ADDR={host} " in output, output


def test_run_batch_streams_labelled_lines_and_returns_metrics(slurm_cluster, tmp_path):
    lines = []
    res = slurm.run_batch(LAB, tasks_per_node=2, workdir=tmp_path, timeout=JOB_TIMEOUT,
                          on_line=lines.append)
    assert res.submitted and res.state == "COMPLETED" and res.returncode == 0, res.output
    assert lines[0].startswith(f"submitted Slurm job {res.job_id}")
    assert any(ln.startswith("0: DLTUTOR_METRICS") for ln in lines), lines
    assert any(ln.startswith("1: DLTUTOR_METRICS") for ln in lines), lines
    _check_two_ranks(res.metrics)
    assert res.path == tmp_path / f"dltutor-{res.job_id}.out" and res.path.exists()


def test_srun_two_tasks(slurm_cluster, tmp_path):
    cmd = slurm.srun_command(LAB, 2, overlap=False)
    assert cmd[:3] == ["srun", "--ntasks", "2"] and "--overlap" not in cmd
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    metrics = slurm.parse_metrics(r.stdout)
    _check_two_ranks(metrics)
    assert {m["launcher"] for m in metrics} == {"slurm"}


def test_failing_task_in_batch_job_is_named(slurm_cluster, tmp_path):
    with pytest.raises(slurm.SlurmError) as info:
        slurm.run_batch(LAB, tasks_per_node=2, args=["--fail-rank", "1", "--exit-code", "7"],
                        workdir=tmp_path, timeout=JOB_TIMEOUT, on_line=lambda s: None)
    err = info.value
    assert err.failed_tasks == [1] and err.state == "FAILED", str(err)
    assert "task(s) 1 failed" in str(err) and "rank 1 fails on purpose" in str(err), str(err)


def test_failing_task_in_srun_step_is_named(slurm_cluster, tmp_path):
    code = "import os, sys; sys.exit(5 if os.environ['SLURM_PROCID'] == '1' else 0)"
    cmd = slurm.srun_command("-c", 2, [code], overlap=False)   # python -u -c CODE
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0
    assert slurm.failed_tasks(r.stderr) == [1], r.stderr
    backend = slurm.SlurmBackend()
    assert backend.failures(r.stderr) == {1: 5}
    assert any(backend.failure_seen(ln) for ln in r.stderr.splitlines()), r.stderr


def test_timeout_then_cancel(slurm_cluster, tmp_path):
    job_id = slurm.submit("#!/bin/bash\n#SBATCH --output=sleep-%j.out\nsleep 300\n", tmp_path, "sleep")
    with pytest.raises(TimeoutError, match=f"job {job_id} still"):
        slurm.poll(job_id, timeout=2)
    slurm.cancel(job_id)
    assert slurm.poll(job_id, timeout=60)[0] == "CANCELLED"


def test_sigterm_to_the_batch_cli_cancels_the_job(slurm_cluster, tmp_path):
    """What an interrupted launch() does: SIGTERM `python -m dltutor.launch.slurm batch`, which scancels."""
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nprint('up', flush=True)\ntime.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-u", "-m", "dltutor.launch.slurm", "batch", "--tasks-per-node",
                             "1", "--workdir", str(tmp_path), str(sleeper)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        job_id = re.match(r"submitted Slurm job (\d+)", first).group(1)
        assert proc.stdout.readline() == f"course environment: {sys.prefix}\n"   # checked first
        assert proc.stdout.readline().startswith("job ") and proc.stdout.readline() == "0: up\n"
        assert slurm.job_state(job_id)[0] == "RUNNING"
        proc.terminate()
        assert proc.wait(timeout=60) == 130, proc.stderr.read()
    finally:
        proc.kill()
    assert slurm.poll(job_id, timeout=60)[0] == "CANCELLED"


def test_unknown_job_is_reported_not_waited_for(slurm_cluster):
    assert slurm.job_state(987654) == ("UNKNOWN", "")
    assert slurm.poll(987654, timeout=30, interval=0.1) == ("UNKNOWN", "")


# ---- pure: no Slurm needed ------------------------------------------------------------------------

@pytest.mark.parametrize("name", sites.list_sites())
def test_render_job_for_every_site(name, monkeypatch):
    monkeypatch.setenv("DLTUTOR_ACCOUNT", "proj123")
    site = sites.load_site(name)
    for nodes in (1, 2):
        text = sites.render_job(name, "course/labs/02_ddp/train.py", nodes=nodes, args=["--tiny"])
        assert "@{" not in text and "${DLTUTOR_ACCOUNT}" not in text
        last = text.rstrip().splitlines()[-1]
        assert last.rstrip('"').endswith("course/labs/02_ddp/train.py --tiny"), last
        tpn = site["gpus_per_node"] or 1
        if site["scheduler"] == "pbs":
            assert f"#PBS -q {site['partition']}" in text and "#PBS -A proj123" in text
            assert f"#PBS -l select={nodes}:system=polaris" in text
            assert last.startswith(f"mpiexec -n {nodes * tpn} --ppn {tpn} ")
            assert 'MASTER_ADDR=$(head -n1 "$PBS_NODEFILE")' in text
            continue
        flag = site.get("queue_directive", "--partition")   # Perlmutter: a QOS, not a partition
        assert f"#SBATCH {flag}={site['partition']}\n" in text
        assert ("#SBATCH --account=proj123" in text) == bool(site["account"])
        assert f"#SBATCH --nodes={nodes}\n" in text
        for module in site["modules"]:
            assert f"module load {module}\n" in text
        if nodes > 1:
            assert ('export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)'
                    + site["master_addr_suffix"] + "\n") in text
        if site["launcher"] == "torchrun":
            assert "#SBATCH --ntasks-per-node=1\n" in text
            assert f"--nproc-per-node {tpn} --node-rank \\$SLURM_NODEID" in last
            assert "--nnodes \\$SLURM_NNODES" in last and "--rdzv-endpoint \\$MASTER_ADDR:\\$MASTER_PORT" in last
        else:
            assert f"#SBATCH --ntasks-per-node={tpn}\n" in text
            assert last.startswith("srun --label --kill-on-bad-exit=1 ") and " -u " in last


def test_torchrun_line_is_evaluated_per_node_with_quoted_args():
    text = sites.render_job("frontera", "/w/my lab.py", nodes=4, args=["--name", "a b$c"], account="p")
    last = text.rstrip().splitlines()[-1]
    assert last.startswith('srun --label --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c "')
    inner = subprocess.run(["bash", "-c", f"printf '%s\\n' {last.split('bash -c ', 1)[1]}"],
                           capture_output=True, text=True, timeout=10).stdout
    check, run = inner.split(" && exec ")
    assert check.endswith("-m dltutor.core.rendezvous --node-rank $SLURM_NODEID"), inner
    assert "--node-rank $SLURM_NODEID" in run and "'/w/my lab.py' --name 'a b$c'" in run, inner
    assert "--rdzv-backend c10d --rdzv-id $SLURM_JOB_ID" in run, inner


def test_account_placeholder_is_refused_until_set(monkeypatch, tmp_path):
    monkeypatch.delenv("DLTUTOR_ACCOUNT", raising=False)
    with pytest.raises(ValueError, match="export DLTUTOR_ACCOUNT="):   # rendering refuses it
        sites.render_job("perlmutter", "train.py", nodes=2)
    text = sites.render_job("perlmutter", "train.py", nodes=2, account="m1234").replace(
        "--account=m1234", "--account=${DLTUTOR_ACCOUNT}")   # a script edited by hand
    with pytest.raises(slurm.SlurmError, match="export DLTUTOR_ACCOUNT="):
        slurm.submit(text, tmp_path)
    assert not (tmp_path / "job.sbatch").exists()


def test_unknown_site_and_bad_sizes():
    with pytest.raises(ValueError, match="no site profile 'nowhere'; known: .*frontera"):
        sites.load_site("nowhere")
    with pytest.raises(ValueError, match="nodes and tasks_per_node must be >= 1"):
        sites.render_job("local", "x.py", nodes=0)
    with pytest.raises(ValueError, match="unknown launcher"):
        sites.render_job("local", "x.py", launcher="ibrun")


def test_without_slurm_run_batch_returns_the_script_and_why(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "sbatch" else real_which(name, *a, **k))
    monkeypatch.setattr(slurm, "submit", lambda *a, **k: pytest.fail("must not submit"))
    res = slurm.run_batch(LAB, tasks_per_node=2)
    assert not res.submitted and res.job_id is None and res.returncode == 1
    assert "no `sbatch` on this machine" in res.reason
    assert res.script.startswith("#!/bin/bash") and "#SBATCH --ntasks-per-node=2" in res.script
    assert str(LAB) in res.script
    r = subprocess.run([sys.executable, "-c", "import shutil, sys; shutil.which = lambda *a, **k: None; "
                        "from dltutor.launch import slurm; sys.argv[0] = 'x'; sys.exit(slurm.main(sys.argv[1:]))",
                        "batch", str(LAB)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not submitted: no `sbatch`" in r.stderr and "#SBATCH" in r.stdout


def test_job_state_falls_back_to_sacct_then_squeue(monkeypatch):
    answers = {"scontrol": (1, "", "slurm_load_jobs error: Invalid job id specified"),
               "sacct": (0, "COMPLETED|0:0\n", ""), "squeue": (0, "", "")}

    def fake_run(cmd, timeout=30, cwd=None):
        code, out, err = answers[cmd[0]]
        return subprocess.CompletedProcess(cmd, code, out, err)
    monkeypatch.setattr(slurm, "_run", fake_run)
    assert slurm.job_state(42) == ("COMPLETED", "0:0")
    answers["sacct"] = (0, "CANCELLED by 0|0:15\n", "")
    assert slurm.job_state(42) == ("CANCELLED", "0:15")
    answers["sacct"] = (1, "", "Slurm accounting storage is disabled")
    answers["squeue"] = (0, "RUNNING\n", "")
    assert slurm.job_state(42) == ("RUNNING", "")


def test_failed_tasks_and_labels():
    text = ("srun: error: nid001: task 3: Exited with exit code 1\n"
            "srun: error: nid001: tasks 0-2,5: Killed\n")
    assert slurm.failed_tasks(text) == [3]
    assert slurm.task_failures(text) == {3: 1, 0: -9, 1: -9, 2: -9, 5: -9}
    assert slurm.failed_tasks("srun: error: n1: tasks 0-1,4: Terminated") == [0, 1, 4]
    assert slurm.task_lines(" 1: a\n 0: b\n 1: c\nsrun: x\n", 1) == ["a", "c"]


def test_failed_task_terminated_by_srun_is_still_blamed():
    # seen on a busy machine: rank 1 exits on purpose, rank 0 loses its peer and exits first,
    # srun then terminates rank 1 while Python is still shutting down
    text = ("1: rank 1 fails on purpose\n"
            "0: RuntimeError: Read error [127.0.0.1]:56211: Connection reset by peer.\n"
            "srun: error: vm: task 0: Exited with exit code 1\n"
            "0: slurmstepd-vm: error: *** STEP 24.0 ON vm CANCELLED AT 2026-11-22T06:14:40 ***\n"
            "srun: error: vm: task 1: Terminated\n")
    assert slurm.failed_tasks(text) == [1]
    # a rank that crashed on its own beats those srun then stopped
    assert slurm.failed_tasks("srun: error: vm: task 2: Segmentation fault\n"
                              "srun: error: vm: tasks 0-1,3: Terminated\n") == [2]
    backend = slurm.SlurmBackend()
    assert backend.split(" 12: hello\n") == (12, "hello\n") and backend.split("srun: x") == (None, "srun: x")


def test_backend_uses_srun_overlap_inside_an_allocation_else_a_batch_job(monkeypatch, tmp_path):
    backend = slurm.SlurmBackend(site="local")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    cmd, env = backend.command("lab.py", 2, ["--tiny"], port=29511, log_dir=tmp_path, python="py")
    assert cmd[:3] == ["srun", "--ntasks", "2"] and "--overlap" in cmd and cmd[-3:] == ["-u", "lab.py", "--tiny"]
    assert env == {"MASTER_PORT": "29511"} and not backend.local
    monkeypatch.delenv("SLURM_JOB_ID")
    cmd, env = backend.command("lab.py", 2, ["--tiny"], port=29511, log_dir=tmp_path, python="py")
    assert cmd[:4] == ["py", "-u", "-m", "dltutor.launch.slurm"] and cmd[-2:] == ["lab.py", "--tiny"]
    assert cmd[cmd.index("--tasks-per-node") + 1] == "2" and env == {}
    with pytest.raises(ValueError, match="do not split evenly"):
        slurm.SlurmBackend(nodes=2).check(3)


# ---- through dltutor.launch.run (the lead registers SlurmBackend as backend='slurm') ---------------

@pytest.fixture
def launch_slurm(monkeypatch):
    from dltutor.launch import run as launch
    monkeypatch.setitem(launch.BACKENDS, "slurm", slurm.SlurmBackend(site="local"))
    return launch.launch


@pytest.fixture
def allocation(slurm_cluster, monkeypatch):
    """A 2-task allocation, as if the Jupyter server ran inside it (SLURM_JOB_ID in the kernel)."""
    r = subprocess.run(["salloc", "--ntasks", "2", "--no-shell"], capture_output=True, text=True,
                       timeout=60)
    job_id = re.search(r"Granted job allocation (\d+)", r.stderr).group(1)
    monkeypatch.setenv("SLURM_JOB_ID", job_id)
    yield job_id
    slurm.cancel(job_id)


def test_launch_backend_slurm_batch_job(slurm_cluster, launch_slurm, tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    res = launch_slurm(LAB, nproc=2, backend="slurm", log_dir=tmp_path, timeout=JOB_TIMEOUT,
                       echo=False)
    assert res.returncode == 0 and res.command[1:4] == ["-u", "-m", "dltutor.launch.slurm"]
    _check_two_ranks(res.metrics)
    assert "1: " not in res.logs[1].read_text() and "DLTUTOR_METRICS" in res.logs[1].read_text()
    assert list((tmp_path / "slurm").glob("dltutor-*.out"))


def test_launch_backend_slurm_srun_step_in_allocation(allocation, launch_slurm, tmp_path):
    res = launch_slurm(LAB, nproc=2, backend="slurm", log_dir=tmp_path, timeout=JOB_TIMEOUT,
                       echo=False)
    assert res.command[0] == "srun" and "--overlap" in res.command
    _check_two_ranks(res.metrics)
    assert {m["job"] for m in res.metrics} == {allocation}   # a step of the allocation


def test_launch_backend_slurm_names_the_failed_rank(allocation, launch_slurm, tmp_path):
    from dltutor.launch.results import LaunchError
    with pytest.raises(LaunchError) as info:
        launch_slurm(LAB, nproc=2, backend="slurm", args=["--fail-rank", "1"], log_dir=tmp_path,
                     timeout=JOB_TIMEOUT, echo=False)
    assert info.value.ranks == [1], str(info.value)
    assert "rank 1 fails on purpose" in str(info.value)


def _step_ids(job_id: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], capture_output=True,
                         text=True, timeout=30).stdout.split()
    return [s for s in out if not s.endswith((".extern", ".interactive", ".batch"))]


def _tagged(tag: str) -> list[int]:
    import psutil
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("TEST_TAG") == tag:
                found.append(p.pid)
        except (psutil.Error, OSError):
            pass
    return found


@pytest.mark.slow
def test_a_killed_kernel_ends_its_srun_step(allocation, tmp_path):
    """A kernel inside a job (as on a portal) launches an srun step, then is SIGKILLed (a restart,
    a cull): within 10 s the step and every one of its tasks are gone, the allocation stays."""
    import os
    import signal
    import time
    import uuid
    tag, marker = uuid.uuid4().hex, tmp_path / "up"
    light = ROOT / "tests" / "scripts" / "light_rank.py"
    code = (f"from dltutor.launch.run import launch; launch({str(light)!r}, nproc=2, "
            f"backend='slurm', args=['--mode', 'sleep', '--ignore-term', '--marker', {str(marker)!r}],"
            f" env={{'TEST_TAG': {tag!r}}}, timeout=600, echo=False)")
    kernel = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                              env={**os.environ, "SLURM_JOB_ID": allocation})
    try:
        deadline = time.time() + 120
        while not all(Path(f"{marker}.{r}").exists() for r in (0, 1)):
            assert time.time() < deadline and kernel.poll() is None, "the step's tasks never came up"
            time.sleep(0.2)
        assert _step_ids(allocation), "the launch made no srun step in the allocation"
        kernel.send_signal(signal.SIGKILL)
        kernel.wait(timeout=10)
        gone_by = time.time() + 10
        while (_step_ids(allocation) or _tagged(tag)) and time.time() < gone_by:
            time.sleep(0.2)
        assert not _tagged(tag), f"tasks still running 10 s after the kernel died: {_tagged(tag)}"
        assert not _step_ids(allocation), f"steps left: {_step_ids(allocation)}"
        assert slurm.job_state(allocation)[0] in ("RUNNING", "PENDING"), "the allocation is kept"
    finally:
        if kernel.poll() is None:
            kernel.kill()


def test_the_cluster_start_waits_for_a_daemons_pid_file(tmp_path):
    """slurmd and slurmctld write their pid files after they fork: the start waits for each (a
    start under load once read slurmd-node1.pid before it existed), with a timeout and one error."""
    script = (Path(__file__).resolve().parents[1] / "scripts/slurm_local.sh").read_text()
    func = script[script.index("wait_pidfile() {"):]
    func = func[:func.index("\n}\n") + 3]
    pidfile = tmp_path / "slurmd-node1.pid"
    run = lambda: subprocess.run(  # noqa: E731
        ["bash", "-c", 'die() { echo "ERROR: $*"; exit 1; }\nTIMEOUT=2\n' + func
         + f'wait_pidfile {pidfile} "slurmd of node node1" /log/slurmd-node1.log && echo waited'],
        capture_output=True, text=True, timeout=30)
    writer = subprocess.Popen(["bash", "-c", f"sleep 0.5; echo $$ > {pidfile}; sleep 5"])
    try:
        assert run().stdout.strip() == "waited"
    finally:
        writer.kill()
        writer.wait()
    pidfile.unlink()
    assert run().stdout.strip() == (f"ERROR: slurmd of node node1 wrote no pid file ({pidfile}) "
                                    "within 2 s: see /log/slurmd-node1.log")
