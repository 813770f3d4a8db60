"""Horovod (lab 03) and DeepSpeed (lab 04) across the two nodes of the test Slurm (`slurm_cluster`).

Every job script is the one a student gets from `render_job("local", ...)`, submitted unchanged.
The jobs run at the same time (module fixture, tests/slurm_jobs.py) and are read back once; each test checks one of them:

  lab 03  horovodrun, 2 nodes x 1 rank   vs  horovodrun, 1 node x 2 ranks (the same 2 ranks)
  lab 03  horovodrun, 2 nodes x 2 ranks  vs  horovodrun, 1 node x 4 ranks
  lab 03  srun, 2 nodes x 1 rank: refused (a Gloo-only Horovod gives each srun task a world of 1)
  lab 04  deepspeed --hostfile (pdsh/ssh), 2 nodes x 1 rank  vs  1 node x 2 ranks
  lab 04  srun, 2 nodes x 2 ranks  vs  1 node x 4 ranks
(DeepSpeed's srun form on 2 x 1, run by hand: the same losses as 1 x 2, 14.0 s against 10.3 s.)
DeepSpeed's 1-node runs are started on this machine while the jobs run, by launch() as a notebook
cell starts them (tests/slurm_jobs.py on_this_machine); Horovod's are horovodrun jobs of 1 node.

Tolerance: each rank's loss at each step equal to the 1-node run's within rtol 1e-6 (margin only:
they agree bit for bit). Both runs have the same ranks, one thread each, the same data per rank and
the same all-reduce over the same ranks; on 2 ranks it adds two float32 numbers (order-free) and
halves the sum (exact). DeepSpeed's 4-rank runs agree bit for bit too. Horovod's 4-rank runs are
submitted with HOROVOD_FUSION_THRESHOLD=0 (a student's `export`; the job script is unchanged, and
horovodrun passes it on to the ranks it starts over ssh): with fusion, the tensors that share a
buffer, and so where the ring cuts it and the order of each element's 4-rank sum, change from run
to run, and the losses drifted apart by 0.25% after 4 steps (2 x 2 against 1 x 4, in this test).
Without fusion every tensor is reduced alone, and 2 x 2 and 1 x 4 agree bit for bit.
"""
import re
from pathlib import Path

import pytest
import slurm_jobs

from dltutor.launch import sites

ROOT = Path(__file__).resolve().parents[1]
HOROVOD_LAB = ROOT / "course" / "labs" / "03_horovod" / "pytorch_synthetic_benchmark.py"
DS_LAB = ROOT / "course" / "labs" / "04_deepspeed" / "train_bert_ds.py"
HV_ARGS = ["--tiny", "--no-cuda", "--threads", "1"]
DS_ARGS = ["--tiny", "--deepspeed_config", str(DS_LAB.parent / "configs" / "zero2.json")]
RTOL = 1e-6
TIMEOUT = 900   # s for all jobs together; they share the 2 cores with the rest of the suite

JOBS = {   # name: (lab, nodes, tasks per node, launcher, args)
    "hv_2x1": (HOROVOD_LAB, 2, 1, "horovodrun", HV_ARGS),
    "hv_1x2": (HOROVOD_LAB, 1, 2, "horovodrun", HV_ARGS),
    "hv_2x2": (HOROVOD_LAB, 2, 2, "horovodrun", HV_ARGS),
    "hv_1x4": (HOROVOD_LAB, 1, 4, "horovodrun", HV_ARGS),
    "hv_srun_2x1": (HOROVOD_LAB, 2, 1, "srun", HV_ARGS),
    "ds_pdsh_2x1": (DS_LAB, 2, 1, "deepspeed", DS_ARGS),
    "ds_srun_2x2": (DS_LAB, 2, 2, "srun", DS_ARGS),
}
ONE_NODE = {"ds_1x2": (DS_LAB, 2, DS_ARGS), "ds_1x4": (DS_LAB, 4, DS_ARGS)}   # name: (lab, ranks, args)
NO_FUSION = {"HOROVOD_FUSION_THRESHOLD": "0"}   # what a student exports before sbatch
JOB_ENV = {"hv_2x2": NO_FUSION, "hv_1x4": NO_FUSION}


@pytest.fixture(scope="module")
def jobs(slurm_cluster, tmp_path_factory):
    """Every job of JOBS, all at once (tests/slurm_jobs.py); {name: dict(state, code, output,
    metrics, ...)}."""
    workdir = tmp_path_factory.mktemp("multinode")
    scripts = {name: sites.render_job("local", lab, nodes=nodes, tasks_per_node=tpn,
                                      launcher=launcher, args=args, job_name=name,
                                      output="%x-%j.out")
               for name, (lab, nodes, tpn, launcher, args) in JOBS.items()}
    def one_node():
        return {name: slurm_jobs.on_this_machine(lab, ranks, args, workdir / name, TIMEOUT)
                for name, (lab, ranks, args) in ONE_NODE.items()}

    done = slurm_jobs.run_all(scripts, workdir, TIMEOUT, env=JOB_ENV, meanwhile=one_node)
    done["workdir"] = workdir
    for name, (_, nodes, tpn, launcher, _) in JOBS.items():   # the figures, with -s
        job = done[name]
        print(f"{name}: {nodes} node(s) x {tpn} rank(s), {launcher}: {job['state']} in {job['run_time']}; "
              + "; ".join(_hosts_lines(job["output"])))
    for name, (_, ranks, _) in ONE_NODE.items():
        job = done[name]
        print(f"{name}: 1 node x {ranks} rank(s), launch(): {job['state']} in {job['run_time']}; "
              + "; ".join(_hosts_lines(job["output"])))
    return done


def _hosts_lines(output: str) -> list[str]:
    return re.findall(r"ranks on hosts: .*", output)


def _completed(job):
    assert (job["state"], job["code"]) == ("COMPLETED", "0:0"), job["output"][-4000:]


def _losses_by_rank(job) -> dict[int, list[float]]:
    return {m["rank"]: m["losses"] for m in job["metrics"]}


def _assert_same_losses(job, baseline, ranks):
    got, want = _losses_by_rank(job), _losses_by_rank(baseline)
    assert sorted(got) == sorted(want) == list(range(ranks)), (got, want)
    for rank in got:
        assert got[rank] == pytest.approx(want[rank], rel=RTOL), (rank, got[rank], want[rank])
    print(f"rank 0's losses: {[round(x, 7) for x in got[0]]} (2 nodes); "
          f"{[round(x, 7) for x in want[0]]} (1 node)")


def _assert_on_two_nodes(job, per_node):
    """Ranks 0..per_node-1 on node1, the next per_node on node2: printed by rank 0, and each rank's
    own record (its hostname where it ran)."""
    line = (f"ranks on hosts: node1 {list(range(per_node))}, node2 {list(range(per_node, 2 * per_node))}"
            f" (2 node(s) x {per_node} rank(s))")
    assert line in job["output"], job["output"][-3000:]
    hosts = {m["rank"]: m["host"] for m in job["metrics"]}
    assert hosts == {r: f"node{1 + r // per_node}" for r in range(2 * per_node)}, job["metrics"]


def _assert_on_one_node(job, ranks):
    """The 1-node run: every rank on one host (a job: Slurm may pick either node; else this machine)."""
    m = re.search(rf"ranks on hosts: (\S+) {re.escape(str(list(range(ranks))))} "
                  rf"\(1 node\(s\) x {ranks} rank\(s\)\)", job["output"])
    assert m, job["output"][-3000:]
    assert {r["host"] for r in job["metrics"]} == {m.group(1)}, job["metrics"]


def _benchmark_total(job, ranks=2) -> float:
    from dltutor.horovod import benchmark
    parsed = benchmark.parse_output(job["output"])
    assert parsed["workers"] == parsed["total_workers"] == ranks, parsed
    return parsed["total_img_sec"]


def test_horovodrun_across_two_hosts_matches_one_node(jobs):
    job, base = jobs["hv_2x1"], jobs["hv_1x2"]
    _completed(job)
    _completed(base)
    assert 'horovod.runner.launch -np 2 -H "$HOSTS" --gloo --network-interface "$IFACE"' in job["script"]
    assert "horovodrun: -H node1:1,node2:1 --network-interface lo" in job["output"]   # lo: 127.0.0.3's route
    _assert_on_two_nodes(job, 1)   # rank 1's own hostname: it ran on node2, started over ssh
    _assert_on_one_node(base, 2)
    _assert_same_losses(job, base, 2)
    two, one = (_benchmark_total(j) for j in (job, base))
    assert f"Total img/sec on 2 node(s) x 1 rank(s): {two:.1f}" in job["output"]   # labelled
    assert f"Total img/sec on 1 node(s) x 2 rank(s): {one:.1f}" in base["output"]
    print(f"lab 03 Horovod, 2 nodes x 1 rank: {two:.1f} img/s in total; 1 node x 2 ranks: {one:.1f} img/s")


def test_horovodrun_two_hosts_two_ranks_each_matches_one_node_of_four(jobs):
    job, base = jobs["hv_2x2"], jobs["hv_1x4"]
    _completed(job)
    _completed(base)
    assert "horovodrun: -H node1:2,node2:2 --network-interface lo" in job["output"]
    _assert_on_two_nodes(job, 2)
    _assert_on_one_node(base, 4)
    assert {m["fusion_threshold_bytes"] for m in job["metrics"] + base["metrics"]} == {0}
    _assert_same_losses(job, base, 4)
    two, one = (_benchmark_total(j, 4) for j in (job, base))
    assert f"Total img/sec on 2 node(s) x 2 rank(s): {two:.1f}" in job["output"]
    assert f"Total img/sec on 1 node(s) x 4 rank(s): {one:.1f}" in base["output"]
    print(f"lab 03 Horovod, 2 nodes x 2 ranks: {two:.1f} img/s in total; 1 node x 4 ranks: {one:.1f} img/s")


def test_horovod_under_srun_without_mpi_is_refused_with_what_to_do(jobs):
    job = jobs["hv_srun_2x1"]
    assert job["state"] == "FAILED", job["output"][-3000:]
    assert "Horovod sees a world of 1" in job["output"], job["output"][-3000:]
    assert "Start the ranks with horovodrun" in job["output"]
    assert "Running benchmark..." not in job["output"] and not job["metrics"]


def test_deepspeed_hostfile_pdsh_across_two_hosts_matches_one_node(jobs):
    job, base = jobs["ds_pdsh_2x1"], jobs["ds_1x2"]
    _completed(job)
    _completed(base)
    _assert_on_two_nodes(job, 1)
    # the job's DLTUTOR_* settings reached the ranks pdsh started (DeepSpeed logs its command)
    pdsh = re.search(r"cmd = pdsh .*-w node1,node2 .*export DLTUTOR_FAST=1;", job["output"])
    assert pdsh, job["output"][:3000]
    leftovers = [p.name for p in jobs["workdir"].iterdir()
                 if p.name.startswith(("hostfile-", ".deepspeed_env-"))]
    assert not leftovers, leftovers   # the job's own hostfile and env file, removed at its end
    _assert_on_one_node(base, 2)
    _assert_same_losses(job, base, 2)
    rate = next(m for m in job["metrics"] if m["rank"] == 0)["samples_per_s"]
    assert f"{rate:.1f} samples/s on 2 node(s) x 1 rank(s) (CPU/gloo)" in job["output"]   # labelled
    _print_samples("deepspeed --hostfile (pdsh)", job, base)


def test_deepspeed_srun_two_hosts_two_ranks_each_matches_one_node_of_four(jobs):
    job, base = jobs["ds_srun_2x2"], jobs["ds_1x4"]
    _completed(job)
    _completed(base)
    _assert_on_two_nodes(job, 2)
    _assert_on_one_node(base, 4)
    _assert_same_losses(job, base, 4)
    rate = next(m for m in job["metrics"] if m["rank"] == 0)["samples_per_s"]
    assert f"{rate:.1f} samples/s on 2 node(s) x 2 rank(s) (CPU/gloo)" in job["output"]
    _print_samples("srun", job, base, "2 nodes x 2 ranks", "1 node x 4 ranks (launch)")


def _print_samples(form, job, base, shape="2 nodes x 1 rank", base_shape="1 node x 2 ranks (launch)"):
    rate = {name: next(m for m in job_["metrics"] if m["rank"] == 0)["samples_per_s"]
            for name, job_ in (("two", job), ("one", base))}
    print(f"lab 04 DeepSpeed ZeRO-2, {form}, {shape}: {rate['two']:.1f} samples/s; "
          f"{base_shape}: {rate['one']:.1f} samples/s")


def test_world_mismatch_names_the_launcher_only_when_horovod_sees_too_few():
    from dltutor.horovod.world import world_mismatch
    srun = {"SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    assert "rank 1: srun started 2 tasks but Horovod sees a world of 1" in world_mismatch(1, srun)
    assert world_mismatch(2, srun) is None                                  # an MPI build: all seen
    assert world_mismatch(2, {**srun, "HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}) is None  # horovodrun
    assert world_mismatch(1, {}) is None                                    # plain python
