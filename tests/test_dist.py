"""dltutor.core.dist: rank detection for each launcher, printing, reporting, seeding, sessions."""
from __future__ import annotations

import json
import socket
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dltutor.core import dist, hosts
from dltutor.core import env as dlenv
from dltutor.core import device

LAB = Path(__file__).parent / "scripts" / "tiny_lab.py"
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT", "HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
               "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
               dist.PREFIXED_ENV, "OMP_NUM_THREADS")


@pytest.fixture
def clean(monkeypatch):
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch
    dist.teardown()


def test_detect_single_process():
    info = dist.detect({})
    assert (info["launcher"], info["rank"], info["world_size"], info["local_rank"]) == (
        "single", 0, 1, 0)


def test_detect_torchrun_wins_over_the_surrounding_slurm_job():
    info = dist.detect({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                        "MASTER_ADDR": "n1", "MASTER_PORT": "29500",
                        "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert (info["launcher"], info["rank"], info["local_rank"], info["world_size"]) == (
        "torchrun", 3, 1, 4)
    assert (info["master_addr"], info["master_port"]) == ("n1", 29500)


def test_detect_names_the_warm_start_which_gives_torchruns_variables():
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "DLTUTOR_WARM_START": "1"}
    info = dist.detect(env)
    assert (info["launcher"], info["rank"], info["world_size"], info["master_port"]) == (
        "warm", 1, 2, 29400)


def test_detect_slurm_derives_address_and_port(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: the node list is parsed here
    info = dist.detect({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8",
                        "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "8",
                        "SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "nid[0012-0015,0020]"})
    assert (info["launcher"], info["rank"], info["local_rank"], info["world_size"]) == (
        "slurm", 5, 1, 8)
    assert info["master_addr"] == "nid0012"
    assert info["master_port"] == 20000 + 123456 % 10000


def test_a_batch_script_or_a_jupyter_job_is_one_process_not_rank_0_of_the_job():
    # what `sbatch --ntasks 2` gives its batch script (and batchspawner its server): no step id
    job = {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_ID": "9",
           "SLURM_JOB_NODELIST": "c1"}
    assert dist.detect(job)["launcher"] == "single" and dist.detect(job)["world_size"] == 1
    step = {**job, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}
    assert (dist.detect(step)["launcher"], dist.detect(step)["rank"]) == ("slurm", 1)


def test_first_host():
    assert hosts.first_host("gpu7") == "gpu7"
    assert hosts.first_host("c[101-104],d5") == "c101"
    assert hosts.first_host("a1,b2") == "a1"


def test_detect_pbs_mpiexec(tmp_path):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x3001c0s13b0n0\nx3001c0s13b1n0\n")
    info = dist.detect({"PMI_RANK": "6", "PMI_SIZE": "8", "PALS_LOCAL_RANKID": "2",
                        "PBS_NODEFILE": str(nodefile), "PBS_JOBID": "4321.polaris"})
    assert (info["launcher"], info["rank"], info["local_rank"], info["world_size"]) == (
        "pbs", 6, 2, 8)
    assert (info["master_addr"], info["master_port"]) == ("x3001c0s13b0n0", 24321)


def test_detect_open_mpi_on_one_node():
    info = dist.detect({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    assert (info["launcher"], info["rank"], info["local_rank"], info["world_size"]) == (
        "mpi", 1, 1, 2)
    assert info["master_addr"] == "127.0.0.1"


def test_rank_print_and_report(clean, capsys):
    clean.setenv("RANK", "1")
    clean.setenv("WORLD_SIZE", "2")
    dist.rank_print("hi", 3)
    dist.rank_print("only rank 0", main_only=True)
    record = dist.report(loss=0.25, step=3)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[rank 1] hi 3"
    assert out[1].startswith("DLTUTOR_METRICS ")
    assert json.loads(out[1].split(" ", 1)[1]) == record == {
        "rank": 1, "world_size": 2, "host": socket.gethostname(), "loss": 0.25, "step": 3}
    assert len(out) == 2
    clean.setenv(dist.PREFIXED_ENV, "1")                   # under dltutor.launch.run
    dist.rank_print("plain")
    assert capsys.readouterr().out == "plain\n"


def test_report_turns_tensors_into_numbers(clean, capsys):
    import torch
    dist.report(acc=torch.tensor(0.5), hist=torch.tensor([1, 2]))
    line = capsys.readouterr().out
    assert json.loads(line.split(" ", 1)[1])["acc"] == 0.5
    assert json.loads(line.split(" ", 1)[1])["hist"] == [1, 2]


def test_seed_is_per_rank(clean):
    import torch
    clean.setenv("RANK", "1")
    clean.setenv("WORLD_SIZE", "2")
    assert dist.seed(5) == 6
    a = torch.rand(3)
    clean.setenv("RANK", "0")
    dist.seed(5)
    assert not torch.equal(a, torch.rand(3))


def test_session_single_process_sets_threads_and_tears_down(clean):
    import torch
    before = torch.get_num_threads()
    try:
        with dist.session() as ctx:
            assert (ctx.rank, ctx.world_size, ctx.is_distributed, ctx.launcher) == (
                0, 1, False, "single")
            assert str(ctx.device) == str(device.device())
            assert dist.context() is ctx
            assert torch.get_num_threads() == dlenv.threads_per_rank(1)
        assert dist.context() is None
    finally:
        torch.set_num_threads(before)


def test_init_from_slurm_variables_in_a_single_task_world(tmp_path):
    """A task started by srun: rank from SLURM_*, MASTER_ADDR from `scontrol show hostnames`."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\n[ \"$1 $2 $3\" = \"show hostnames node[7-9]\" ]"
                                   " && echo 127.0.0.1 && echo node8\n")
    (fake / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NTASKS="1", SLURM_JOB_ID="7777",
               SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="1",
               SLURM_JOB_NODELIST="node[7-9]", OMP_NUM_THREADS="1",
               PATH=f"{fake}{os.pathsep}{env.get('PATH', '')}")
    done = subprocess.run([sys.executable, str(LAB)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    line = next(s for s in done.stdout.splitlines() if s.startswith("DLTUTOR_METRICS"))
    metrics = json.loads(line.split(" ", 1)[1])
    assert metrics["launcher"] == "slurm" and metrics["world_size"] == 1
    assert metrics["master_addr"] == "127.0.0.1"           # from scontrol, not "node7"
    assert metrics["master_port"] == str(20000 + 7777)
    assert "[rank 0] hello world_size=1" in done.stdout
