"""Labs 02 and 05 across the two nodes of the test Slurm (the `slurm_cluster` fixture: node1, node2).

Every job script is the one `dltutor.launch.sites.render_job("local", ...)` gives a student, submitted
unchanged with sbatch: lab 02 on 2 nodes x 1 rank (the seed's shape) and 2 nodes x 2 ranks, each with
its ranks started by srun and by one torchrun per node; lab 05's all-reduce bench on 2 nodes x 1 rank
and 2 nodes x 2 ranks; and beside them the 1-node runs with the same ranks and the same global batch
(on this machine, through launch(): tests/slurm_jobs.py on_this_machine).
The srun form of lab 02 on 2 x 1 goes through `launch(..., backend="slurm", nodes=2)`, as a notebook
cell starts it. All jobs run once, at the same time (module fixture, tests/slurm_jobs.py); the tests
read their outputs: the host of every rank (as the job printed it), the label on img/s, and the
1-node answer (dltutor.ddp.multinode).
"""
import time
from pathlib import Path

import pytest
import slurm_jobs

from dltutor.allreduce.sweep import node_link
from dltutor.core.hosts import hosts_line
from dltutor.ddp import multinode
from dltutor.launch import run, sites, slurm
from dltutor.launch.srun_lines import SRUN_PIECE, rejoin

ROOT = Path(__file__).resolve().parents[1]
LAB02 = ROOT / "course/labs/02_ddp/train.py"
LAB05 = ROOT / "course/labs/05_allreduce/allreduce_bench.py"
DDP_ARGS = ["--tiny", "--steps", "8"]      # 8 steps on 2 and on 4 ranks
BENCH_ARGS = ["--tiny"]
NODES = ("node1", "node2")                 # the test cluster's nodes (scripts/slurm_local.sh)
JOB_TIMEOUT = 900                          # s for all jobs together on a busy 2-core machine

# name: (script, nodes, tasks per node, launcher, args)
JOBS = {"ddp_torchrun_2x1": (LAB02, 2, 1, "torchrun", DDP_ARGS),
        "ddp_srun_2x2": (LAB02, 2, 2, "srun", DDP_ARGS),
        "ddp_torchrun_2x2": (LAB02, 2, 2, "torchrun", DDP_ARGS),
        "bench_2x1": (LAB05, 2, 1, "srun", BENCH_ARGS),
        "bench_2x2": (LAB05, 2, 2, "srun", BENCH_ARGS)}
# the 1-node runs, on this machine while the jobs run: name: (script, ranks, args)
ONE_NODE = {"ddp_1x2": (LAB02, 2, DDP_ARGS), "ddp_1x4": (LAB02, 4, DDP_ARGS),
            "bench_1x2": (LAB05, 2, BENCH_ARGS)}
# each 2-node run of lab 02 and the 1-node run it must agree with
PAIRS = {"ddp_launch_2x1": "ddp_1x2", "ddp_torchrun_2x1": "ddp_1x2",
         "ddp_srun_2x2": "ddp_1x4", "ddp_torchrun_2x2": "ddp_1x4"}


@pytest.fixture(scope="module")
def jobs(slurm_cluster, tmp_path_factory):
    """Lab 02 on 2 x 1 through launch(), then every job of JOBS (all at once); all outputs."""
    workdir = tmp_path_factory.mktemp("multinode")
    t0 = time.monotonic()
    res = run.launch(LAB02, nproc=2, backend="slurm", nodes=2, args=DDP_ARGS, echo=False,
                     timeout=JOB_TIMEOUT, log_dir=workdir / "launch")
    launched = dict(job_id=None, state="COMPLETED 0:0" if res.returncode == 0 else
                    f"exit {res.returncode}", metrics=res.metrics,
                    took=f"{time.monotonic() - t0:.1f} s from the cell",
                    output="\n".join(Path(p).read_text() for p in res.logs.values()))
    scripts = {name: sites.render_job("local", script, nodes=nodes, tasks_per_node=tpn,
                                      launcher=launcher, args=args, output="%x-%j.out",
                                      job_name=name)
               for name, (script, nodes, tpn, launcher, args) in JOBS.items()}
    def one_node():
        return {name: slurm_jobs.on_this_machine(script, ranks, args, workdir / name, JOB_TIMEOUT)
                for name, (script, ranks, args) in ONE_NODE.items()}

    found = {name: dict(job, state=f"{job['state']} {job['code']}",
                        took=f"RunTime {job['run_time']}" if job["job_id"] else job["run_time"])
             for name, job in slurm_jobs.run_all(scripts, workdir, JOB_TIMEOUT,
                                                 meanwhile=one_node).items()}
    found["ddp_launch_2x1"] = launched
    for name, job in found.items():   # the figures the report quotes (pytest -s shows them)
        m = job["metrics"][0] if job["metrics"] else {}
        rate = f", {m['global_img_per_s']:.1f} img/s" if "global_img_per_s" in m else ""
        print(f"{name}: job {job['job_id']} {job['state']}, {job['took']}, {m.get('shape')}: "
              f"{m.get('hosts')}{rate}")
    return found


def test_every_job_completed(jobs):
    for name, job in jobs.items():
        assert job["state"] == "COMPLETED 0:0", f"{name}: {job['state']}\n{job['output'][-3000:]}"


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_lab02_ranks_on_both_nodes_print_their_hosts(jobs, name):
    job, per_node = jobs[name], int(name[-1])
    hosts = multinode.hosts(job["metrics"])
    assert hosts == sorted(NODES * per_node), f"{name}: ranks ran on {hosts}"
    assert hosts_line(hosts) in job["output"], job["output"][-2000:]   # printed by rank 0
    label = f"2 node(s) x {per_node} rank(s)"
    assert f"img/s on {label} (CPU/gloo)" in job["output"], job["output"][-2000:]
    assert all(m["shape"] == label for m in job["metrics"])


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_lab02_gives_the_one_node_answer(jobs, name):
    reference = jobs[PAIRS[name]]["metrics"]
    assert len(set(multinode.hosts(reference))) == 1      # the reference really is one node
    row = multinode.agreement(jobs[name]["metrics"], reference)
    print(multinode.agreement_line(row))
    assert row["agrees"], multinode.agreement_line(row)
    assert row["steps"] == 8 and row["world_size"] == len(jobs[name]["metrics"])


def test_lab05_bench_across_nodes_beside_one_node(jobs):
    two, one = jobs["bench_2x1"], jobs["bench_1x2"]
    [summary] = [m for m in two["metrics"] if "results" in m]
    [reference] = [m for m in one["metrics"] if "results" in m]
    assert summary["hosts"] == list(NODES) and summary["shape"] == "2 node(s) x 1 rank(s)"
    assert "ranks on hosts: node1 [0], node2 [1] (2 node(s) x 1 rank(s))" in two["output"]
    assert all(summary["checks"].values()) and all(reference["checks"].values())
    # the test cluster's nodes are loopback addresses of one machine: the output must say so
    assert summary["link"]["loopback"] and summary["link"]["nodes"] == 2, summary["link"]
    assert "the same as inside a node" in two["output"]
    keys = [(r["algorithm"], r["bytes"]) for r in summary["results"]]
    assert keys == [(r["algorithm"], r["bytes"]) for r in reference["results"]]
    for r2, r1 in zip(summary["results"], reference["results"]):   # side by side (pytest -s)
        print(f"{r2['algorithm']:<19} {r2['bytes']:>8} B  2x1 {r2['time_s'] * 1e6:9.1f} us  "
              f"1x2 {r1['time_s'] * 1e6:9.1f} us")
    for s in (summary, reference):   # both ping-pongs ran and were fitted; on a busy machine the
        # small sizes' times can hide the latency, and the fit then keeps alpha at 0 (cost.py)
        alpha, beta = s["alpha_s"], s["beta_s_per_byte"]
        assert len(s["pingpong"]) == 3 and alpha >= 0 and beta >= 0 and alpha + beta > 0, s


def test_lab05_bench_on_two_nodes_of_two_ranks(jobs):
    job, one = jobs["bench_2x2"], jobs["bench_1x2"]
    [summary] = [m for m in job["metrics"] if "results" in m]
    assert summary["hosts"] == ["node1", "node1", "node2", "node2"], summary["hosts"]
    assert summary["shape"] == "2 node(s) x 2 rank(s)"
    assert "ranks on hosts: node1 [0, 1], node2 [2, 3] (2 node(s) x 2 rank(s))" in job["output"]
    assert summary["checks"] and all(summary["checks"].values()), summary["checks"]  # vs dist.all_reduce
    [reference] = [m for m in one["metrics"] if "results" in m]
    assert [(r["algorithm"], r["bytes"]) for r in summary["results"]] == [
        (r["algorithm"], r["bytes"]) for r in reference["results"]]   # the same sweep, 4 ranks
    assert summary["link"]["loopback"] and summary["link"]["nodes"] == 2, summary["link"]


# ---------------------------------------------------------------- pieces, no job needed
def test_srun_pieces_of_a_long_line_are_rejoined():
    line = 'DLTUTOR_METRICS {"rank": 1, "pad": "' + "x" * 2500 + '"}'
    raw = line.encode()
    pieces = [raw[i:i + SRUN_PIECE].decode() for i in range(0, len(raw), SRUN_PIECE)]
    text = "\n".join(["0: before"] + [f"1: {p}" for p in pieces] + ["0: after"])
    assert rejoin(text) == ["0: before", f"1: {line}", "0: after"]
    assert slurm.parse_metrics(text) == [{"rank": 1, "pad": "x" * 2500}]
    backend = slurm.SlurmBackend()
    split = [backend.split(ln) for ln in text.splitlines()]
    assert [s for s in split if s[1] is not None] == [(0, "before"), (1, line), (0, "after")]


def test_nodes_need_the_slurm_backend_and_a_job_of_its_own(monkeypatch):
    with pytest.raises(ValueError, match="needs backend='slurm'"):
        run.launch(LAB02, nproc=2, backend="local", nodes=2)
    monkeypatch.setenv("SLURM_JOB_ID", "7")          # a kernel inside a one-node Jupyter job
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    step, _ = slurm.SlurmBackend(nodes=1).command(str(LAB02), 2, [], port=1, log_dir=Path("/tmp"))
    job, _ = slurm.SlurmBackend(nodes=2).command(str(LAB02), 2, [], port=1, log_dir=Path("/tmp"))
    assert step[0] == "srun" and job[2:5] == ["-m", "dltutor.launch.slurm", "batch"]
    assert job[job.index("--nodes") + 1] == "2"


def test_node_link_says_loopback_only_for_loopback_addresses():
    assert node_link(["localhost"])["loopback"] and node_link(["localhost"])["nodes"] == 1
    assert not node_link(["no-such-host.invalid"])["loopback"]


def test_job_nodes_follows_the_nodes_in_service(slurm_cluster, monkeypatch):
    assert multinode.job_nodes(2) == 2                      # node1 and node2 are in service
    from dltutor.launch import nodes
    monkeypatch.setattr(nodes, "nodes_in_service", lambda: 1)   # the other one is down
    assert multinode.job_nodes(2) == 1
