"""scripts/slurm_local.sh start --nodes 2, on its own: two nodes under their own names and addresses,
ssh between them, the machine's own files untouched, and nothing of a node left after `stop`.

A cluster of this test's own (its own state folder, so its own ports and sshd port), beside the
suite's shared one; it runs no job that needs a rendezvous port, only `srun hostname` and ssh. It
starts after the shared one (`slurm_cluster`), so the munged they share is the shared one's and this
cluster's `stop` leaves it running.
"""
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
MACHINE_FILES = [Path("/etc/hosts"), Path("/etc/ssh/ssh_config")]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def _script(state: Path, *args, timeout=120):
    env = {**os.environ, "DLTUTOR_SLURM_DIR": str(state)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _in_cluster(state: Path, *argv, timeout=60):
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env)


def _processes_in(namespaces: set[str]) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.readlink(proc / "ns" / "uts") in namespaces:
                    found.append(f"{proc.name} {(proc / 'comm').read_text().strip()}")
            except OSError:
                continue
    return found


@pytest.fixture(scope="module")
def two_nodes(slurm_cluster, tmp_path_factory):
    """{state, namespaces, before}: a 2-node cluster of this module's own, stopped at the end."""
    state = tmp_path_factory.mktemp("cluster")
    before = {p: _digest(p) for p in MACHINE_FILES}
    r = _script(state, "start", "--nodes", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    namespaces = {(state / f"ns-{n}").read_text().strip() for n in ("node1", "node2")}
    yield {"state": state, "namespaces": namespaces, "before": before, "start": r.stdout}
    _script(state, "stop")


def test_each_node_has_its_name_and_address(two_nodes):
    assert "node1:idle node2:idle" in two_nodes["start"]
    assert len(two_nodes["namespaces"]) == 2          # a UTS namespace per node
    r = _in_cluster(two_nodes["state"], "srun", "-N2", "-n2", "bash", "-c",
                    'echo "$SLURM_PROCID $(hostname) $(getent hosts $(hostname) | cut -d" " -f1)"')
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:2]) == ["0 node1 127.0.0.2", "1 node2 127.0.0.3"], r.stdout


def test_ssh_and_pdsh_between_nodes_need_no_options(two_nodes):
    r = _in_cluster(two_nodes["state"], "srun", "-N1", "-w", "node1", "bash", "-c",
                    "ssh node2 hostname && pdsh -R ssh -w node1,node2 hostname | sort")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["node2", "node1: node1", "node2: node2"], r.stdout


def test_bad_requests_get_one_clear_line(two_nodes):
    r = _script(two_nodes["state"], "kill-node", "node9")
    assert r.returncode == 1 and "no node 'node9' in this cluster: node1 node2" in r.stderr, r.stderr
    r = _script(two_nodes["state"], "start", "--nodes", "3")
    assert r.returncode == 1 and "a cluster of 2 node(s) is running" in r.stderr, r.stderr
    r = _script(two_nodes["state"], "start", "--nodes", "two")
    assert r.returncode == 1 and "--nodes takes a number of nodes from 1 to 99" in r.stderr, r.stderr


def test_stop_leaves_nothing_of_a_node_and_never_wrote_the_machines_files(two_nodes):
    state = two_nodes["state"]
    assert _processes_in(two_nodes["namespaces"]), "the nodes' daemons should be running"
    r = _script(state, "stop")
    assert r.returncode == 0, r.stderr
    assert _processes_in(two_nodes["namespaces"]) == []         # no daemon, step or ssh session
    assert not list(state.glob("*.pid")) and not list(state.glob("ns-*"))
    assert _script(state, "status").returncode == 3
    assert {p: _digest(p) for p in MACHINE_FILES} == two_nodes["before"]
