"""Faults across the two nodes of the test Slurm (the `slurm_cluster` fixture: node1, node2).

Each fault ends within a bounded time (every wait has a timeout) with one message naming what is
wrong, and leaves no process of the job on any node (no process with the job's SLURM_JOB_ID):
  * a node that dies mid-job: lab 02 on 2 nodes x 1 rank (srun form), node2 killed after a step line
    (`scripts/slurm_local.sh kill-node`); Slurm marks it DOWN after SlurmdTimeout and requeues or
    ends the job; run_batch names node2, Slurm's state for it and the rank that ran there. Then node2
    boots again (`revive-node`) and a job on both nodes runs: the cluster is left as it was found;
  * a MASTER_ADDR the nodes do not resolve (a site's master_addr_suffix, "node1i"): every rank says so;
  * MASTER_PORT already taken on node1: srun form (rank 0 says so) and torchrun form (the launch
    line's check on node 0 says so before torchrun starts); torch's own EADDRINUSE, from a torchrun
    started without that check, is named by run_batch's failure report (a unit test on its text);
  * more CPUs per node than the nodes have: the job that can never start is cancelled, named;
  * a hostfile / -H list naming a host not in the job, or more slots than the job has there.
The lab jobs are the scripts `render_job` gives a student, unchanged (held with `sbatch --hold` where
the test must know the job id first, to take its port).
"""
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dltutor.core import rendezvous
from dltutor.launch import hostfile, job_faults, sites, slurm

ROOT = Path(__file__).resolve().parents[1]
LAB02 = ROOT / "course/labs/02_ddp/train.py"
SCRIPT = ROOT / "scripts/slurm_local.sh"
JOB_TIMEOUT = 300       # s: a 2-node job of lab 02 on a busy 2-core machine, fault included
NODES = ("node1", "node2")


def _run(*cmd, timeout=60, cwd=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def job_processes(job_id) -> list[str]:
    """'pid comm' of every process on this machine (every node) with SLURM_JOB_ID=<job_id>."""
    tag, found = f"SLURM_JOB_ID={job_id}".encode(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if tag in fh.read().split(b"\0"):
                    found.append(f"{pid} {Path(f'/proc/{pid}/comm').read_text().strip()}")
        except OSError:
            continue
    return found


def assert_nothing_left(job_id, within: float = 30.0):
    """No process of the job on any node, once Slurm has had `within` s to clean up."""
    deadline = time.monotonic() + within
    while (left := job_processes(job_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"job {job_id} left processes behind: {left}"
    assert _run("squeue", "-h", "-j", str(job_id), "-o", "%T").stdout.strip() == "", \
        f"job {job_id} is still in the queue"


def wait_nodes_idle(timeout: float = 90.0) -> dict:
    """{node: sinfo state} once both nodes are idle (or mixed); the last states after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        rows = _run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
        states = dict(r.split() for r in rows if r.strip())
        if all(states.get(n) in ("idle", "mixed") for n in NODES) or time.monotonic() > deadline:
            return states
        time.sleep(1)


# ---- MASTER_ADDR that does not resolve, MASTER_PORT taken: three jobs at once -------------------

def _render(name, launcher, suffix=""):
    site = dict(sites.load_site("local"), master_addr_suffix=suffix)
    return sites.render_job(site, LAB02, nodes=2, tasks_per_node=1, launcher=launcher,
                            args=["--tiny"], output="%x-%j.out", job_name=name)


def _submit_held(text, workdir, name):
    path = workdir / f"{name}.sbatch"
    path.write_text(text)
    r = _run("sbatch", "--parsable", "--hold", str(path), timeout=60, cwd=workdir)   # as submit() does
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


@pytest.fixture(scope="module")
def rendezvous_jobs(slurm_cluster, tmp_path_factory):
    """{name: (job id, state, output, port)}: lab 02 with MASTER_ADDR 'node1i' (srun form), and with
    MASTER_PORT taken on node1 by a listener of this test (srun and torchrun forms)."""
    workdir = tmp_path_factory.mktemp("rendezvous")
    node1 = re.search(r"NodeAddr=(\S+)", _run("scontrol", "show", "node", "-o", "node1").stdout).group(1)
    jobs, squatters = {}, []
    try:
        jobs["addr"] = (slurm.submit(_render("addr", "srun", suffix="i"), workdir, "addr"), None)
        for name, launcher in (("port_srun", "srun"), ("port_torchrun", "torchrun")):
            job_id = _submit_held(_render(name, launcher), workdir, name)
            port = 20000 + int(job_id) % 10000          # the template's MASTER_PORT for this job
            squat = socket.socket()
            squat.bind((node1, port))
            squat.listen()
            squatters.append(squat)
            assert _run("scontrol", "release", job_id).returncode == 0
            jobs[name] = (job_id, port)
        done = {}
        for name, (job_id, port) in jobs.items():
            start = time.monotonic()
            state, _ = slurm.poll(job_id, timeout=JOB_TIMEOUT)
            print(f"{name}: job {job_id} ended {state} ({time.monotonic() - start:.0f} s more)")
            done[name] = (job_id, state, (workdir / f"{name}-{job_id}.out").read_text(), port)
        yield done
    finally:
        for job_id, _ in jobs.values():
            slurm.cancel(job_id)
        for squat in squatters:
            squat.close()


def test_master_addr_that_does_not_resolve_is_named_by_every_rank(rendezvous_jobs):
    job_id, state, output, _ = rendezvous_jobs["addr"]
    assert state == "FAILED", output
    assert "MASTER_ADDR=node1i" in output                  # what the job script exported
    for rank, node in enumerate(NODES):
        line = f"rank {rank} on {node}: MASTER_ADDR 'node1i' does not resolve"
        assert line in output, output
    assert "first node 'node1' plus 'i'" in output and "master_addr_suffix" in output
    assert "Traceback" not in output                        # one message, no stack trace
    err = slurm.job_error(job_id, state, "", output)
    assert "MASTER_ADDR 'node1i' does not resolve" in str(err), str(err)
    assert_nothing_left(job_id)


def test_master_port_taken_on_node1_srun_form(rendezvous_jobs):
    job_id, state, output, port = rendezvous_jobs["port_srun"]
    assert state == "FAILED", output
    assert f"rank 0 on node1: MASTER_PORT {port} is already in use on node1" in output, output
    err = slurm.job_error(job_id, state, "", output)
    assert err.failed_tasks == [0] and f"MASTER_PORT {port} is already in use" in str(err), str(err)
    assert_nothing_left(job_id)


def test_master_port_taken_on_node1_torchrun_form(rendezvous_jobs):
    """The torchrun launcher checks the port on node 0 before torchrun's agent would fail on it."""
    job_id, state, output, port = rendezvous_jobs["port_torchrun"]
    assert state == "FAILED", output
    assert (f"0: the launcher of node rank 0 on node1: MASTER_PORT {port} is already in use on "
            "node1") in output, output
    assert "Traceback" not in output                        # one message, no stack trace
    err = slurm.job_error(job_id, state, "", output)
    assert err.failed_tasks == [0] and f"MASTER_PORT {port} is already in use" in str(err), str(err)
    assert_nothing_left(job_id)


def test_torch_eaddrinuse_blames_the_task_that_could_not_listen():
    """A torchrun started without the check (by hand): torch's own EADDRINUSE line, on task 0, is
    named as the cause, not task 1 that only lost its peer."""
    output = ("job 7 on node[1-2]: MASTER_ADDR=node1 MASTER_PORT=20007\n"
              "1: [W] The client socket has failed to connect to node1:20007\n"
              "0: torch.distributed.DistNetworkError: The server socket has failed to listen on any "
              "local network address. port: 20007, useIpv6: false, code: -98, name: EADDRINUSE, "
              "message: address already in use\n"
              "0: ranks on hosts: node1 [0], node2 [1] (2 node(s) x 1 rank(s))\n"
              "srun: error: node1: task 0: Exited with exit code 1\n"
              "srun: error: node2: task 1: Exited with exit code 1\n")
    err = slurm.job_error("7", "FAILED", "1:0", output)
    assert err.failed_tasks == [0], str(err)
    assert ("task 0 on node1 could not listen on port 20007 (EADDRINUSE): something else already "
            "listens on the job's MASTER_PORT 20007 on node1") in str(err), str(err)


# ---- more than a node has: refused, named --------------------------------------------------------

def test_more_cpus_per_node_than_the_nodes_have_is_cancelled_and_named(slurm_cluster, tmp_path):
    cpus = {n: int(c) for n, c in (r.split() for r in _run(
        "sinfo", "-h", "-N", "-o", "%N %c").stdout.splitlines() if r.strip())}
    asked = max(cpus.values()) + 1
    with pytest.raises(slurm.SlurmError) as info:
        slurm.run_batch(LAB02, nodes=2, tasks_per_node=asked, args=["--tiny"], workdir=tmp_path,
                        timeout=JOB_TIMEOUT, on_line=lambda line: None)
    msg = str(info.value)
    assert msg.startswith(f"Slurm job {info.value.job_id} can never start"), msg
    assert f"asks 2 node(s) with {asked} CPU(s) each" in msg, msg
    assert all(f"{n} {c}" in msg for n, c in cpus.items()), msg
    assert_nothing_left(info.value.job_id)


# ---- hostfile / -H checked against the job -------------------------------------------------------

def test_hostfile_and_host_list_are_checked_against_the_job(slurm_cluster, tmp_path):
    (tmp_path / "good").write_text("# the job's nodes\nnode1 slots=1\nnode2 slots=1\n")
    (tmp_path / "stranger").write_text("node1 slots=1\nnode3 slots=1\n")
    check = f"{sys.executable} -m dltutor.launch.hostfile"
    steps = [f"--hostfile {tmp_path / 'good'}", f"--hostfile {tmp_path / 'stranger'}",
             "-H node1:1,node2:3", "-H node1,node2"]
    wrap = "; ".join(f"{check} {s} 2>&1; echo rc=$?" for s in steps)
    r = _run("sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "-o", str(tmp_path / "hf-%j.out"),
             "--wrap", wrap)
    job_id = r.stdout.strip()
    assert slurm.poll(job_id, timeout=JOB_TIMEOUT) == ("COMPLETED", "0:0")
    out = (tmp_path / f"hf-{job_id}.out").read_text()
    assert re.findall(r"rc=(\d+)", out) == ["0", "2", "2", "0"], out
    assert f"fits job {job_id}: node1 slots=1, node2 slots=1" in out
    assert (f"names host node3, which is not a node of job {job_id} (its nodes: node1, node2)") in out
    assert f"asks 3 slot(s) on node2, but job {job_id} has 1 task(s) there" in out
    assert_nothing_left(job_id)


def test_hostfile_parsing_and_bad_input():
    assert hostfile.parse_hostfile("a slots=2  # x\n\nb slots=1\n") == [("a", 2), ("b", 1)]
    assert hostfile.parse_hosts("a:2,b") == [("a", 2), ("b", 1)]
    assert hostfile.tasks_per_node("2(x2),1", ["a", "b", "c"]) == {"a": 2, "b": 2, "c": 1}
    with pytest.raises(hostfile.HostfileError, match="line 1 is 'a 2'"):
        hostfile.parse_hostfile("a 2\n")
    with pytest.raises(hostfile.HostfileError, match="not inside a Slurm job"):
        hostfile.check([("a", 1)], "-H a", environ={})


# ---- a node dies mid-job -------------------------------------------------------------------------

def _node(action, node="node2"):
    r = _run("bash", str(SCRIPT), action, node, timeout=180)
    assert r.returncode == 0, f"{action} {node}: {r.stdout}{r.stderr}"


def _kill_node2_mid_job(workdir):
    """Lab 02 on 2 nodes x 1 rank through run_batch; node2 killed once rank 0 prints a step line.
    (SlurmError, the job's output, seconds from the kill to the error)."""
    lines, killed = [], {}

    def on_line(line):
        lines.append(line)
        if re.search(r"epoch \d+ step \d+", line) and not killed:
            killed["at"] = time.monotonic()
            threading.Thread(target=_node, args=("kill-node",)).start()

    with pytest.raises(slurm.SlurmError) as info:
        slurm.run_batch(LAB02, nodes=2, tasks_per_node=1, args=["--tiny", "--epochs", "200"],
                        workdir=workdir, timeout=JOB_TIMEOUT, on_line=on_line)
    assert killed, "the job failed before node2 was killed:\n" + "\n".join(lines)
    return info.value, "\n".join(lines), time.monotonic() - killed["at"]


def test_node_that_dies_mid_job_is_named_with_its_rank(slurm_cluster, tmp_path):
    deadline = time.monotonic() + 60      # earlier tests' jobs may still be completing
    while (others := _run("squeue", "-h", "-o", "%i %j %T").stdout.strip()) \
            and time.monotonic() < deadline:
        time.sleep(1)
    assert not others, f"other jobs on the cluster; killing node2 would kill them too: {others}"
    try:
        err, output, seconds = _kill_node2_mid_job(tmp_path)
    finally:   # however it went: node2 boots again and both nodes are back in service
        _node("revive-node")
        states = wait_nodes_idle()
    print(f"kill-node node2 -> SlurmError after {seconds:.0f} s: {str(err).splitlines()[0]}")
    assert all(states.get(n) in ("idle", "mixed") for n in NODES), states
    r = _run("srun", "--nodes=2", "--ntasks-per-node=1", "hostname", timeout=120)
    assert r.returncode == 0 and sorted(r.stdout.split()) == list(NODES), r.stdout + r.stderr

    assert err.state in ("NODE_FAIL", "REQUEUED"), err.state     # requeued: Slurm's JobRequeue=1
    on_node2 = job_faults.ranks_on_hosts(output)["node2"]        # as the job printed it
    msg = str(err)
    assert "node node2 failed (Slurm has it DOWN" in msg, msg
    assert on_node2 and re.search(rf"ranks? {', '.join(map(str, on_node2))} ran on node2", msg), msg
    assert err.failed_tasks == on_node2
    assert "srun: error: Node failure on node2" in output       # Slurm's own words in the job output
    assert_nothing_left(err.job_id)


def test_fault_reports_read_the_job_output():
    """The parts of the reports that read a job's output (no Slurm needed)."""
    output = ("0: [rank 0] ranks on hosts: n1 [0, 1], n2 [2, 3] (2 node(s) x 2 rank(s))\n"
              "job 7 on n[1-2]: MASTER_ADDR=n1 MASTER_PORT=20007\n"
              "0: torch.distributed.DistNetworkError: The server socket has failed to listen on any "
              "local network address. port: 20007, useIpv6: false, code: -98, name: EADDRINUSE\n"
              "srun: error: n1: task 0: Exited with exit code 1\nsrun: error: n2: task 1: Terminated\n")
    assert job_faults.ranks_on_hosts(output) == {"n1": [0, 1], "n2": [2, 3]}
    assert job_faults.task_hosts(output) == {0: "n1", 1: "n2"}
    task, line = job_faults.known_cause(output, [1, 0])
    assert task == 0 and line.startswith("task 0 on n1 could not listen on port 20007 (EADDRINUSE)")
    assert "the job's MASTER_PORT 20007 on n1" in line
    assert job_faults.known_cause("0: some other error\n", [0]) is None


def test_rendezvous_checks_without_slurm():
    """dist.init's checks, and their `python -m dltutor.core.rendezvous` form for a launcher's agent."""
    bad = dict(rank=1, launcher="slurm", master_addr="node1i.invalid", master_port=20001)
    with pytest.raises(rendezvous.RendezvousError, match="MASTER_ADDR 'node1i.invalid' does not resolve"):
        rendezvous.check(bad)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        info = dict(rank=0, launcher="slurm", master_addr="127.0.0.1", master_port=taken.getsockname()[1])
        with pytest.raises(rendezvous.RendezvousError, match=f"MASTER_PORT {info['master_port']} is "
                           "already in use"):
            rendezvous.check(info)
        rendezvous.check(dict(info, rank=1))                    # only rank 0 hosts the store
        rendezvous.check(dict(info, launcher="torchrun"))       # torchrun's agent holds the port
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(info["master_port"]))
        r = subprocess.run([sys.executable, "-m", "dltutor.core.rendezvous", "--node-rank", "0"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "the launcher of node rank 0" in r.stderr, r.stderr
        r = subprocess.run([sys.executable, "-m", "dltutor.core.rendezvous", "--node-rank", "1"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and not r.stderr, r.stderr

