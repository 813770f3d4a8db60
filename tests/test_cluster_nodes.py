"""scripts/slurm_local.sh start --nodes 2, on its own, both ways: on loopback addresses, and with
`--link 100mbit` (each node in a network namespace of its own, its link to the other capped by tc).
Two nodes under their own names and addresses, ssh between them, the machine's own files untouched,
and nothing of a node (process, namespace, interface) left after `stop`.

With the link, lab 05's hierarchical all-reduce runs as the 2 nodes x 2 ranks job a student gets
from `render_job`: the bytes each node's interface sent to the other node per all-reduce are the
model's (flat ring 2(N-1)/N x D = 1.5 D, hierarchical 2(M-1)/M x D = 1 D, for 4 ranks as 2 x 2),
so the 2-D scheme's saving on the link between nodes is counted, not told. Its times are printed
beside each other (pytest -s), never asserted.

Clusters of this test's own (their own state folders, so their own ports and sshd port), beside
the suite's shared one. The loopback one runs no job that needs a rendezvous port (its nodes share
the machine's network with the shared cluster's), only `srun hostname` and ssh; the linked one's
nodes have network stacks of their own. They start after the shared one (`slurm_cluster`), so the
munged they share is the shared one's and their `stop` leaves it running.
"""
import hashlib
import ipaddress
import os
import subprocess
from pathlib import Path

import pytest
import slurm_jobs

from dltutor.allreduce.link import node_interface
from dltutor.launch import sites

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
MACHINE_FILES = [Path("/etc/hosts"), Path("/etc/ssh/ssh_config")]
LINK = "100mbit"             # the linked cluster's cap on each node's link, each direction
HIER_LAB = ROOT / "course" / "labs" / "05_allreduce" / "hierarchical_allreduce.py"


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


def _net_leftovers(state: Path) -> list[str]:
    """The linked cluster's network namespaces and interfaces still on the machine (dlt<id>...)."""
    prefix = _net_prefix(state)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.split("\n")
    return [n for n in netns if n.startswith(prefix)] + [l for l in links if f" {prefix}" in l]


def _net_prefix(state: Path) -> str:
    """What scripts/slurm_local.sh names the cluster's namespaces and interfaces after (net_id)."""
    return "dlt" + hashlib.sha1(str(state).encode()).hexdigest()[:4]


@pytest.fixture(scope="module", params=["loopback", "link"])
def two_nodes(request, slurm_cluster, tmp_path_factory):
    """{mode, state, namespaces, before, start}: a 2-node cluster of this module's own, on loopback
    addresses or with `--link LINK`; stopped at the end."""
    state = tmp_path_factory.mktemp(f"cluster-{request.param}")
    before = {p: _digest(p) for p in MACHINE_FILES}
    link = ["--link", LINK] if request.param == "link" else []
    r = _script(state, "start", "--nodes", "2", *link)
    assert r.returncode == 0, r.stdout + r.stderr
    namespaces = {(state / f"ns-{n}").read_text().strip() for n in ("node1", "node2")}
    yield {"mode": request.param, "state": state, "namespaces": namespaces, "before": before,
           "start": r.stdout}
    _script(state, "stop")


def test_each_node_has_its_name_and_address(two_nodes):
    assert "node1:idle node2:idle" in two_nodes["start"]
    assert len(two_nodes["namespaces"]) == 2          # a UTS namespace per node
    r = _in_cluster(two_nodes["state"], "srun", "-N2", "-n2", "bash", "-c",
                    'echo "$SLURM_PROCID $(hostname) $(getent hosts $(hostname) | cut -d" " -f1) '
                    '$(readlink /proc/self/ns/net)"')
    assert r.returncode == 0, r.stderr
    rows = sorted(line.split() for line in r.stdout.split("\n") if line.strip())
    assert [row[:2] for row in rows] == [["0", "node1"], ["1", "node2"]], r.stdout
    addresses = [row[2] for row in rows]
    if two_nodes["mode"] == "loopback":               # the machine's network, two loopback addresses
        assert addresses == ["127.0.0.2", "127.0.0.3"], r.stdout
        assert rows[0][3] == rows[1][3] == os.readlink("/proc/self/ns/net")
    else:                                             # a network each, on the script's own subnet
        subnet = (two_nodes["state"] / "link").read_text().split()[1]
        assert addresses == [f"{subnet}.2", f"{subnet}.3"], r.stdout
        assert not any(ipaddress.ip_address(a).is_loopback for a in addresses)
        assert len({rows[0][3], rows[1][3], os.readlink("/proc/self/ns/net")}) == 3, r.stdout


def test_ssh_and_pdsh_between_nodes_need_no_options(two_nodes):
    r = _in_cluster(two_nodes["state"], "srun", "-N1", "-w", "node1", "bash", "-c",
                    "ssh node2 hostname && pdsh -R ssh -w node1,node2 hostname | sort")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["node2", "node1: node1", "node2: node2"], r.stdout


def test_the_link_is_capped_both_ways_and_only_with_link(two_nodes):
    state = two_nodes["state"]
    prefix = _net_prefix(state)
    if two_nodes["mode"] == "loopback":
        assert _net_leftovers(state) == [] and not (state / "link").exists()
        return
    assert len(_net_leftovers(state)) == 5, _net_leftovers(state)   # 2 namespaces, 2 veths, bridge
    for node in ("node1", "node2"):   # into the node (the machine's end) and out of it (eth0 inside)
        for argv in (["tc", "qdisc", "show", "dev", f"{prefix}{node}"],
                     ["tc", "-n", f"{prefix}-{node}", "qdisc", "show", "dev", "eth0"]):
            out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
            assert "tbf" in out and "rate 100Mbit" in out, (argv, out)


def _hierarchical_job(state: Path, workdir: Path) -> dict:
    """Lab 05's hierarchical all-reduce as 2 nodes x 2 ranks (render_job, unchanged) on `state`'s cluster."""
    script = sites.render_job("local", HIER_LAB, nodes=2, tasks_per_node=2, launcher="srun",
                              args=["--tiny", "--per-node", "2"], job_name="hier_2x2",
                              output="%x-%j.out")
    with slurm_jobs.exported({"SLURM_CONF": str(state / "slurm.conf")}):
        return slurm_jobs.run_all({"hier_2x2": script}, workdir, timeout=600)["hier_2x2"]


def test_hierarchical_allreduce_sends_the_models_bytes_over_the_link(two_nodes, tmp_path):
    if two_nodes["mode"] == "loopback":   # nothing to count: the loopback carries every rank's traffic
        assert [node_interface(a) for a in ("127.0.0.2", "127.0.0.3")] == [None, None]
        return
    job = _hierarchical_job(two_nodes["state"], tmp_path)
    assert job["state"] == "COMPLETED", job["output"][-3000:]
    summary = next(m for m in job["metrics"] if m.get("rank") == 0 and "results" in m)
    assert summary["hosts"] == ["node1", "node1", "node2", "node2"] and summary["groups_on_hosts"]
    assert all(summary["checks"].values()), summary["checks"]
    assert "messages between nodes cross the network" in job["output"]
    counted = summary["link_bytes"]
    d, got, model = counted["bytes"], counted["measured"], counted["model"]
    assert model == {"hierarchical": d, "ring": 1.5 * d, "gloo": None}
    for alg in ("hierarchical", "ring"):   # payload plus TCP/IP headers and acknowledgements
        assert model[alg] <= got[alg] <= 1.1 * model[alg], (alg, got[alg] / d)
    assert got["hierarchical"] < 0.75 * got["ring"]
    times = {r["algorithm"]: r["time_s"] for r in summary["results"] if r["bytes"] == d}
    print(f"hier_2x2 over --link {LINK}: bytes per node per all-reduce of {d} B: "
          + ", ".join(f"{a} {got[a] / d:.2f} x D" for a in got)
          + "; times: " + ", ".join(f"{a} {t * 1e3:.1f} ms" for a, t in times.items())
          + f"; {job['run_time']}")


def test_bad_requests_get_one_clear_line(two_nodes, tmp_path):
    if two_nodes["mode"] == "link":
        r = _script(two_nodes["state"], "start", "--nodes", "2")
        assert r.returncode == 1 and f"a cluster with --link {LINK} is running" in r.stderr, r.stderr
        r = _script(tmp_path, "start", "--nodes", "2", "--link", "fast")
        assert r.returncode == 1 and "--link takes a rate in tc's units (100mbit, 1gbit)" in r.stderr, r.stderr
        r = _script(tmp_path, "start", "--link", LINK)
        assert r.returncode == 1 and "--link needs a cluster of several nodes" in r.stderr, r.stderr
        return
    r = _script(two_nodes["state"], "start", "--nodes", "2", "--link", LINK)
    assert r.returncode == 1 and "a cluster with no --link (loopback addresses) is running" in r.stderr, r.stderr
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
    assert _net_leftovers(state) == []                           # no namespace, veth or bridge
    assert not (state / "link").exists()
