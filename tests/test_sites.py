"""Site profiles and the job scripts rendered from them (no Slurm needed): the environment the job
activates and checks, the queue chosen from the profile's limits, the account, the launchers each
scheduler can run, the centres' settings carried to every rank, the GPU order. The jobs themselves
run on the test Slurm in tests/test_site_dry_run.py."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from dltutor.launch import gpu_bind, hostfile, site_lines, sites

GPU_SITES = [s for s in sites.list_sites() if s != "local"]
LAB02, LAB03, LAB04 = ("course/labs/02_ddp/train.py", "course/labs/03_horovod/pytorch_synthetic_benchmark.py",
                       "course/labs/04_deepspeed/train_bert_ds.py")
URL = re.compile(r"^https://\S+$")


def profile(**over) -> dict:
    """The local profile with some keys replaced (a made-up site, so no centre's numbers here)."""
    return {**sites.load_site("local"), "key": "made-up", **over}


QUEUES = {"small": {"max_nodes": 2, "max_time": "01:00:00", "source": "https://example.org/q"},
          "big": {"min_nodes": 3, "max_nodes": 64, "max_time": "12:00:00",
                  "source": "https://example.org/q"}}


# ---- every shipped profile ------------------------------------------------------------------
@pytest.mark.parametrize("name", GPU_SITES)
def test_every_centre_setting_names_its_source(name):
    site = sites.load_site(name, account="proj123")
    assert site["env"].endswith("/envs/dltutor-venv"), site["env"]
    assert URL.match(site.get("env_source", "")), f"{name}: env_source"
    assert site["queues"] and site["partition"] in site["queues"], (name, site["partition"])
    for qname, q in site["queues"].items():
        assert URL.match(q.get("source", "")), f"{name} queue {qname}: no source"
        if q.get("limits", "").startswith("not recorded: "):   # said so in every job for it
            assert "max_nodes" not in q and "max_time" not in q
            text = sites.render_job(name, LAB02, account="p", queue=qname)
            assert f"# queue {qname}: limits {q['limits']}; see {q['source']}\n" in text
            continue
        assert q["max_nodes"] >= q.get("min_nodes", 1) and sites._seconds(q["max_time"]) > 0
    for e in site["export"]:
        assert URL.match(e.get("source", "")), f"{name}: export {e['name']} has no source"
    if site["gpu_order"]:
        assert sorted(site["gpu_order"]) == list(range(site["gpus_per_node"]))
        assert URL.match(site.get("gpu_order_source", ""))


def test_a_centre_without_ssh_between_nodes_refuses_the_launchers_that_need_it():
    for launcher, lab in (("horovodrun", LAB03), ("deepspeed", LAB04)):
        with pytest.raises(ValueError, match=rf"juwels: {launcher} starts the ranks of the other "
                                             r"nodes over ssh, .*https://apps.fz-juelich.de/jsc/"
                                             r"hps/juwels/access.html\): run it on one node"):
            sites.render_job("juwels", lab, nodes=2, account="p", launcher=launcher)
        assert f"launched with {launcher}" in sites.render_job("juwels", lab, nodes=1, account="p",
                                                              launcher=launcher)
    assert "launched with srun" in sites.render_job("juwels", LAB04, nodes=2, account="p")


REFUSED = {("juwels", LAB03, 2)}   # horovodrun across nodes at JSC: the test above


@pytest.mark.parametrize("name,lab,nodes", [(s, lab, n) for s in GPU_SITES for lab in (LAB02, LAB03, LAB04)
                                            for n in (1, 2) if (s, lab, n) not in REFUSED])
def test_each_job_activates_the_sites_environment_and_checks_dltutor_first(name, lab, nodes):
    site = sites.load_site(name, account="proj123")
    text = sites.render_job(name, lab, nodes=nodes, args=["--tiny"], account="proj123")
    assert "${DLTUTOR_ACCOUNT}" not in text and "@{" not in text
    body = text.splitlines()
    activate = next(i for i, ln in enumerate(body) if ln.startswith(
        'if [ -f "$DLTUTOR_ENV/bin/activate" ]; then source "$DLTUTOR_ENV/bin/activate"'))
    check = next(i for i, ln in enumerate(body) if ln.startswith(f'{site["python"]} -P -c "import dltutor, sys;'))
    launch = len(body) - 1 - next(i for i, ln in enumerate(reversed(body)) if ln.strip())
    assert f'DLTUTOR_ENV="{site["env"]}"' in body
    for m in site["modules"]:
        assert body.index(f"module load {m}") < activate
    assert activate < check < launch
    for e in site["export"]:
        assert any(ln.startswith(f'export {e["name"]}=') for ln in body[check:launch]), e["name"]
    launcher = "horovodrun" if lab == LAB03 else site["launcher"]
    assert f"launched with {launcher}" in body[1]
    if site["scheduler"] == "pbs":
        assert "scontrol" not in text and "srun" not in text and "$SLURM" not in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True, timeout=30)


@pytest.mark.parametrize("name", GPU_SITES)
def test_an_unset_account_is_refused_when_rendering(name, monkeypatch):
    monkeypatch.delenv("DLTUTOR_ACCOUNT", raising=False)
    with pytest.raises(ValueError, match=rf"{name} needs your allocation .*account=.*export "
                                         r"DLTUTOR_ACCOUNT="):
        sites.render_job(name, LAB02, nodes=1)
    monkeypatch.setenv("DLTUTOR_ACCOUNT", "proj9")
    assert re.search(r"^#(SBATCH --account=|PBS -A )proj9$", sites.render_job(name, LAB02), re.M)


# ---- queues ---------------------------------------------------------------------------------
def test_the_default_queue_then_the_first_that_fits_else_one_error_with_the_limits():
    site = profile(partition="small", queues=QUEUES)
    assert sites.pick_queue(site, 2, "00:30:00")[0] == "small"
    assert sites.pick_queue(site, 4, "00:30:00")[0] == "big"
    assert sites.pick_queue(site, 3, "02:00:00")[0] == "big"
    with pytest.raises(ValueError, match=r"no queue takes 1 node\(s\) for 13:00:00 \(small: 1-2 "
                                         r"nodes, 01:00:00; big: 3-64 nodes, 12:00:00; from "
                                         r"https://example.org/q\)"):
        sites.pick_queue(site, 1, "13:00:00")
    with pytest.raises(ValueError, match="queue small takes 4 node"):
        sites.pick_queue(site, 4, "00:10:00", queue="small")
    with pytest.raises(ValueError, match="no queue 'nope'.*known: small, big"):
        sites.pick_queue(site, 1, "00:10:00", queue="nope")
    text = sites.render_job(site, LAB02, nodes=4)
    assert "#SBATCH --partition=big\n" in text and "#SBATCH --nodes=4\n" in text


def test_a_queue_selected_by_qos_and_a_queue_of_smaller_nodes():
    site = profile(partition="small", queues=QUEUES, queue_directive="--qos")
    assert "#SBATCH --qos=small\n" in sites.render_job(site, LAB02, nodes=1)
    small = {"small": {**QUEUES["small"], "gpus_per_node": 1, "cpus_per_node": 32}}
    site = profile(partition="small", queues=small, gpus_per_node=3, cpus_per_task=32)
    assert ": 1 rank(s) on one node" in sites.render_job(site, LAB02, nodes=1).splitlines()[1]
    with pytest.raises(ValueError, match=r"3 rank\(s\) x 32 CPUs do not fit a node of queue small"):
        sites.render_job(site, LAB02, nodes=1, tasks_per_node=3)


# ---- launchers per scheduler ----------------------------------------------------------------
def test_a_pbs_site_offers_only_what_pbs_can_run():
    site = profile(scheduler="pbs", template="pbs/polaris.pbs.tmpl", launcher="mpiexec",
                   gpus_per_node=4, cpus_per_task=16)
    for launcher in ("srun", "torchrun"):
        with pytest.raises(ValueError, match=rf"launcher '{launcher}' cannot start ranks in a pbs "
                                             r"job at made-up; choose one of \['deepspeed', "
                                             r"'horovodrun', 'mpiexec'\]"):
            sites.render_job(site, LAB02, nodes=2, launcher=launcher)
    for lab, launcher in ((LAB02, "mpiexec"), (LAB03, "horovodrun"), (LAB04, "deepspeed")):
        text = sites.render_job(site, lab, nodes=2, launcher=None if lab != LAB04 else launcher)
        assert "scontrol" not in text and "SLURM" not in text and "srun " not in text, text
        if launcher != "mpiexec":
            assert '--nodefile "$PBS_NODEFILE"' in text
    last = sites.render_job(site, LAB02, nodes=2).rstrip().splitlines()[-1]
    assert last.startswith("mpiexec -n 8 --ppn 4 --depth 16 --cpu-bind depth "), last


def test_lab_03_defaults_to_horovodrun_everywhere_and_an_explicit_launcher_wins():
    assert site_lines.default_launcher(LAB03, profile()) == "horovodrun"
    assert site_lines.default_launcher(LAB02, profile(launcher="torchrun")) == "torchrun"
    text = sites.render_job("local", LAB03, nodes=2, tasks_per_node=1)
    assert "-m horovod.runner.launch -np 2" in text
    assert "srun --label" in sites.render_job("local", LAB03, nodes=2, launcher="srun")


@pytest.mark.parametrize("scheduler", ["slurm", "pbs"])
def test_deepspeed_carries_the_sites_settings_to_its_pdsh_ranks(scheduler, tmp_path):
    exports = [{"name": "NCCL_NET", "value": "AWS Libfabric", "source": "https://example.org/n"},
               {"name": "MY_SITE_VAR", "value": "1", "source": "https://example.org/n"}]
    extra = dict(scheduler="pbs", template="pbs/polaris.pbs.tmpl") if scheduler == "pbs" else {}
    text = sites.render_job(profile(export=exports, **extra), LAB04, nodes=2, launcher="deepspeed")
    grep = next(ln for ln in text.splitlines() if "env | grep -E" in ln)
    pattern = re.search(r"grep -E '(.*)'", grep).group(1)
    env = {"NCCL_NET": "AWS Libfabric", "MY_SITE_VAR": "1", "FI_CXI_DISABLE_HOST_REGISTER": "1",
           "LD_LIBRARY_PATH": "/opt/x", "DLTUTOR_DATA": "/d", "OMP_NUM_THREADS": "4", "HOME": "/h",
           "SECRET_TOKEN": "no"}
    kept = subprocess.run(["grep", "-E", pattern], input="\n".join(f"{k}={v}" for k, v in env.items()),
                          capture_output=True, text=True, timeout=10).stdout.split("\n")
    assert {ln.split("=")[0] for ln in kept if ln} == set(env) - {"HOME", "SECRET_TOKEN"}
    assert 'export NCCL_NET="AWS Libfabric"   # https://example.org/n' in text


def test_exports_expand_in_the_job_shell_and_quote_what_they_must():
    exports = [{"name": "LD_LIBRARY_PATH", "value": "/soft/ofi/lib:$LD_LIBRARY_PATH"},
               {"name": "ODD", "value": 'a "b" `c`'}]
    setup = site_lines.setup(profile(export=exports), "python")
    out = subprocess.run(["bash", "-c", "\n".join(ln for ln in setup.splitlines()
                                                  if ln.startswith("export"))
                          + '\necho "$LD_LIBRARY_PATH|$ODD"'], capture_output=True, text=True,
                         env={"LD_LIBRARY_PATH": "/base", "PATH": os.environ["PATH"]}, timeout=10)
    assert out.stdout.strip() == '/soft/ofi/lib:/base|a "b" `c`', out


# ---- the environment check ------------------------------------------------------------------
def _run_setup(site, tmp_path, python="python"):
    script = site_lines.setup(site, python) + "\necho REACHED\n"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], capture_output=True,
                          text=True, timeout=120, env={**env, "SCRATCH": str(tmp_path)})


def test_a_missing_or_wrong_environment_stops_the_job_with_one_error(tmp_path):
    out = _run_setup(profile(env="$SCRATCH/envs/dltutor-venv"), tmp_path)
    assert out.returncode == 1 and "REACHED" not in out.stdout
    assert out.stderr.strip() == (f"error: no course environment at {tmp_path}/envs/dltutor-venv: "
                                  "install the course there first (README, 'On an HPC portal': "
                                  f"make setup VENV={tmp_path}/envs/dltutor-venv)")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "envs/dltutor-venv")],
                   check=True, timeout=120, env={k: v for k, v in os.environ.items()
                                                 if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
    out = _run_setup(profile(env="$SCRATCH/envs/dltutor-venv"), tmp_path)
    assert out.returncode == 1 and "REACHED" not in out.stdout
    assert "No module named 'dltutor'" in out.stderr
    assert (f"{tmp_path}/envs/dltutor-venv/bin/python cannot import dltutor (see above): install the "
            f"course into {tmp_path}/envs/dltutor-venv (make setup VENV=") in out.stderr
    os.symlink(sys.prefix, tmp_path / "envs/course")
    out = _run_setup(profile(env="$SCRATCH/envs/course"), tmp_path)
    assert out.returncode == 0 and out.stdout.split()[-1] == "REACHED", out.stderr
    assert out.stdout.startswith(f"course environment: {sys.prefix}\n"), out.stdout


def test_a_conda_environment_is_put_first_on_path(tmp_path):
    conda = tmp_path / "envs/dltutor"
    (conda / "conda-meta").mkdir(parents=True)
    (conda / "bin").mkdir()
    (conda / "bin/python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')   # the course's
    (conda / "bin/python").chmod(0o755)                                               # Python
    site = profile(env="$SCRATCH/envs/dltutor-venv")
    text = sites.render_job(site, LAB02, env="$SCRATCH/envs/dltutor")
    assert 'DLTUTOR_ENV="$SCRATCH/envs/dltutor"' in text
    out = _run_setup({**site, "env": "$SCRATCH/envs/dltutor"}, tmp_path)
    assert out.returncode == 0 and out.stdout.split()[-1] == "REACHED", out.stderr
    assert out.stdout.startswith(f"course environment: {sys.prefix}\n"), out.stdout


# ---- GPU order, PBS node files --------------------------------------------------------------
def test_gpu_order_gives_each_local_rank_its_gpu():
    order = {"DLTUTOR_GPU_ORDER": "3,2,1,0"}
    assert [gpu_bind.visible_device({**order, "PALS_LOCAL_RANKID": str(r)}) for r in range(4)] == \
        ["3", "2", "1", "0"]
    assert gpu_bind.visible_device({**order, "SLURM_LOCALID": "1",
                                    "CUDA_VISIBLE_DEVICES": "4,5,6,7"}) == "6"
    with pytest.raises(SystemExit, match="no local rank"):
        gpu_bind.visible_device(order)
    out = subprocess.run([sys.executable, "-m", "dltutor.launch.gpu_bind", "sh", "-c",
                          "echo $CUDA_VISIBLE_DEVICES"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, **order, "PMI_LOCAL_RANK": "0"})
    assert out.stdout.strip() == "3", out
    # horovodrun's ranks inherit the batch step's SLURM_LOCALID=0: its own variable comes first
    assert gpu_bind.visible_device({**order, "SLURM_LOCALID": "0", "HOROVOD_LOCAL_RANK": "2"}) == "1"
    site = profile(gpu_order=[1, 0], gpus_per_node=2)
    for lab, launcher in ((LAB02, "srun"), (LAB03, "horovodrun")):
        text = sites.render_job(site, lab, nodes=2, launcher=launcher)
        last = text.rstrip().splitlines()[-1]
        assert 'export DLTUTOR_GPU_ORDER="1,0"' in text and " -m dltutor.launch.gpu_bind " in last
        assert "note:" not in text
    text = sites.render_job(site, LAB04, nodes=2, launcher="deepspeed")
    assert "gpu_bind" not in text
    assert ('echo "note: deepspeed gives local rank r GPU r; the GPU order of local test Slurm '
            '(this machine) (1,0) is applied by srun, mpiexec, horovodrun only"') in text


def test_a_pbs_host_list_is_checked_against_the_node_file(tmp_path, capsys):
    nodefile = tmp_path / "nodes"
    nodefile.write_text("x3001\nx3001\nx3002\n")
    assert hostfile.nodefile_nodes(str(nodefile)) == ["x3001", "x3002"]
    assert hostfile.main(["-H", "x3001:4,x3002:4", "--nodefile", str(nodefile)]) == 0
    assert hostfile.main(["-H", "x3001:4,x9999:4", "--nodefile", str(nodefile)]) == 2
    err = capsys.readouterr().err
    assert "names host x9999, which is not a node of job" in err and f"(`sort -u {nodefile}`)" in err


def test_the_readme_names_each_sites_environment_launcher_and_queues():
    import tomllib
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for name in GPU_SITES:
        raw = tomllib.loads((Path(sites.__file__).resolve().parents[2] / "course/labs/sites"
                             / f"{name}.toml").read_text())
        row = next((ln for ln in readme.splitlines() if ln.startswith(f"| {name} |")), None)
        assert row is not None, f"README has no row for {name} (section 'Batch jobs at a centre')"
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == f"`{raw['env']}`", (name, cells[2], raw["env"])
        assert cells[4] == raw["launcher"], (name, cells[4])
        for queue in raw["queues"]:
            assert f"`{queue}`" in cells[5], (name, queue)


def test_a_time_is_written_the_one_way_both_schedulers_read_alike():
    assert sites._seconds("01:30:00") == 5400 and sites._seconds("2-00:00:00") == 172800
    for bad in ("30", "1:30", "ab", "1:xx:00", "1-2"):
        with pytest.raises(ValueError, match="write it as HH:MM:SS"):
            sites.render_job(profile(partition="small", queues=QUEUES), LAB02, time=bad)
