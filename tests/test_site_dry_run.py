"""The site dry-run tier: each GPU site's job scripts, as `render_job` writes them, run on the test
Slurm (the `slurm_cluster` fixture) with the centre's commands, file systems and installed course
stood in for (tests/site_dry_run.py says what is translated and why, and nothing else is).

Per site (frontera, lonestar6, vista, perlmutter, polaris, juwels): labs 02, 03 and 04 on 2 nodes x 1
rank with the site's default launcher for the lab, lab 02 on 1 node; Polaris's lab 04 also with the
deepspeed (pdsh) launcher, whose ranks get the site's settings only through DS_ENV_FILE. All jobs run
at once (one module fixture, tests/slurm_jobs.py). Each job must complete and reach the lab's first
step; the stand-ins' records must show the profile's modules and set-up commands run before the
environment is activated, every rank running the course environment's Python, every [[export]] of
the profile (and the modules' LD_LIBRARY_PATH) reaching every rank with the value the script set,
the profile's gpu_order giving each local rank its GPU, and mpiexec's --ppn/--depth as the profile
says. Two profile copies whose `env` holds no course (an empty venv; no folder at all) must stop with
the job's one clear error, before any rank starts.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import site_dry_run as dry
import slurm_jobs

from dltutor.launch import sites

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "course" / "labs"
ACCOUNT = "dltutor-test"
SITES = ("frontera", "lonestar6", "vista", "perlmutter", "polaris", "juwels")
LAB = {"02": (LABS / "02_ddp" / "train.py", ["--tiny", "--steps", "2"]),
       "03": (LABS / "03_horovod" / "pytorch_synthetic_benchmark.py",
              ["--tiny", "--no-cuda", "--threads", "1", "--num-iters", "1"]),
       "04": (LABS / "04_deepspeed" / "train_bert_ds.py",
              ["--tiny", "--deepspeed_config", str(LABS / "04_deepspeed" / "configs" / "zero2.json")])}
ONE_NODE_ONLY = {("juwels", "03")}   # JSC allows no ssh between nodes: refused across nodes
JOBS = {   # name: (site, lab, nodes, launcher: None for the site's default for the lab)
    **{f"{s}-{lab}-2x1": (s, lab, 2, None) for s in SITES for lab in LAB
       if (s, lab) not in ONE_NODE_ONLY},
    **{f"{s}-{lab}-1x1": (s, lab, 1, None) for s, lab in ONE_NODE_ONLY},
    **{f"{s}-02-1x1": (s, "02", 1, None) for s in SITES},
    "polaris-04-deepspeed-2x1": ("polaris", "04", 2, "deepspeed")}
NO_COURSE = {"frontera-empty-env": "$SCRATCH/envs/no-course-venv",   # a venv without dltutor
             "frontera-missing-env": "$SCRATCH/envs/never-installed"}
TIMEOUT = 600   # s for all jobs together (they share 2 cores with the rest of the suite)
CLEARED = ("VIRTUAL_ENV", "CONDA_PREFIX", "SCRATCH", "WORK", "PSCRATCH", "PROJECT", "CFS",
           "CUDA_VISIBLE_DEVICES", "PYTHONPATH", "DLTUTOR_ENV", "DLTUTOR_GPU_ORDER", "DLTUTOR_DATA")
VENV = os.path.realpath(sys.prefix)


def _install_course(profiles: dict, tmp: Path) -> None:
    """The course where each profile's `env` says (a link to this environment: see site_dry_run),
    and an empty venv (no pip, no course) where NO_COURSE's first copy points."""
    for key, site in profiles.items():
        link = dry.env_path(site, tmp / key)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(VENV, target_is_directory=True)
    no_course = dict(profiles["frontera"], env=NO_COURSE["frontera-empty-env"])
    empty = dry.env_path(no_course, tmp / "frontera")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(empty)], check=True, timeout=120)


def _wanted(profiles: dict) -> dict:
    """name: (profile, lab, nodes, launcher) for JOBS and the NO_COURSE copies of Frontera's."""
    wanted = {name: (profiles[s], lab, nodes, launcher)
              for name, (s, lab, nodes, launcher) in JOBS.items()}
    for name, env in NO_COURSE.items():
        wanted[name] = (dict(profiles["frontera"], env=env), "02", 2, None)
    return wanted


@pytest.fixture(scope="module")
def dry_run(slurm_cluster, tmp_path_factory):
    """Every job of JOBS and NO_COURSE, all at once; {name: dict(job, site, lab, nodes, root,
    rendered, dropped, calls, procs)}."""
    tmp = tmp_path_factory.mktemp("site-dry-run")
    stubs, workdir = dry.install_stubs(tmp), tmp / "jobs"
    profiles = {s: sites.load_site(s, account=ACCOUNT) for s in SITES}
    _install_course(profiles, tmp)
    scripts, envs, info = {}, {}, {}
    for name, (site, lab, nodes, launcher) in _wanted(profiles).items():
        script, args = LAB[lab]
        rendered = sites.render_job(site, script, nodes=nodes, tasks_per_node=1, args=args,
                                    account=ACCOUNT, launcher=launcher, job_name=name,
                                    output="%x-%j.out")
        root = tmp / site["key"]
        scripts[name], dropped = dry.translate(rendered, root, site["master_addr_suffix"])
        envs[name] = dry.prepare_job(workdir / name, stubs, site, root)
        info[name] = dict(site=site, lab=lab, nodes=nodes, dir=workdir / name, root=root,
                          rendered=rendered, dropped=dropped)
    with pytest.MonkeyPatch.context() as mp:   # nothing of this shell's environment leaks in
        for var in CLEARED:
            mp.delenv(var, raising=False)
        done = slurm_jobs.run_all(scripts, workdir, TIMEOUT, env=envs)
    for name, job in done.items():
        info[name].update(job=job, calls=dry.calls(info[name]["dir"]),
                          procs=dry.processes(info[name]["dir"]))
        print(f"{name}: {job['state']} {job['code']} in {job['run_time']}; "
              f"dropped {info[name]['dropped']}")
    return info


def _ranks(run) -> list[dict]:
    return [p for p in run["procs"] if p["kind"] == "rank"]


def _local_rank(ids: dict) -> int:
    for var in ("PALS_LOCAL_RANKID", "LOCAL_RANK", "HOROVOD_LOCAL_RANK", "SLURM_LOCALID"):
        if var in ids:
            return int(ids[var])
    raise AssertionError(f"no local rank among {ids}")


def _import_check(run) -> dict:
    checks = [p for p in run["procs"] if "-c" in p["argv"]
              and p["argv"][p["argv"].index("-c") + 1].startswith("import dltutor")]
    assert len(checks) == 1, [p["argv"] for p in run["procs"]]
    return checks[0]


FIRST_STEP = {   # lab: what its output says once the first step ran, on N nodes x 1 rank
    "02": lambda n: f"img/s on {n} node(s) x 1 rank(s) (CPU/gloo)",
    "03": lambda n: f"Total img/sec on {n} node(s) x 1 rank(s)",
    "04": lambda n: f"samples/s on {n} node(s) x 1 rank(s) (CPU/gloo)"}
STEP_METRIC = {"02": "step_times_ms", "03": "img_sec", "04": "losses"}
BINDING_LAUNCHERS = {"srun", "mpiexec", "horovodrun"}   # start ranks through dltutor.launch.gpu_bind


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_job_reaches_the_labs_first_step(dry_run, name):
    run = dry_run[name]
    job, nodes = run["job"], run["nodes"]
    assert (job["state"], job["code"]) == ("COMPLETED", "0:0"), job["output"][-4000:]
    assert not re.search(r"(?m)^error: ", job["output"]), job["output"][-4000:]   # the job's own
    [env] = re.findall(r"^course environment: (.+)$", job["output"], re.M)   # the import check
    assert os.path.realpath(env) == VENV, env
    if nodes > 1:
        hosts = ", ".join(f"node{i + 1} [{i}]" for i in range(nodes))
        assert f"ranks on hosts: {hosts} ({nodes} node(s) x 1 rank(s))" in job["output"], \
            job["output"][-3000:]
    assert FIRST_STEP[run["lab"]](nodes) in job["output"], job["output"][-3000:]
    metrics = job["metrics"]
    assert [m["rank"] for m in metrics] == list(range(nodes)), metrics
    assert all(m[STEP_METRIC[run["lab"]]] for m in metrics), metrics


@pytest.mark.parametrize("name", sorted(JOBS))
def test_modules_and_setup_run_before_the_environment_is_activated(dry_run, name):
    run = dry_run[name]
    check = _import_check(run)
    recorded = [c for c in run["calls"] if c[0] != "mpiexec"]
    want = dry.expected_calls(run["site"], run["root"], check["environ"])
    assert [c[:2] for c in recorded] == want, (recorded, want)
    assert all(c[2] == "" for c in recorded), f"called with an environment active: {recorded}"
    assert check["environ"].get("VIRTUAL_ENV") == VENV, check["environ"].get("VIRTUAL_ENV")
    assert check["real_prefix"] == VENV, check["prefix"]


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_rank_runs_the_course_environment(dry_run, name):
    run = dry_run[name]
    ranks, check = _ranks(run), _import_check(run)
    assert len(ranks) == run["nodes"], [p["argv"] for p in run["procs"]]
    hosts = sorted(p["host"] for p in ranks)
    assert hosts == (["node1", "node2"] if run["nodes"] == 2 else hosts[:1]), hosts
    assert set(hosts) <= {"node1", "node2"}, hosts
    for p in ranks:
        assert p["real_prefix"] == VENV, (p["host"], p["prefix"], p["executable"])
    assert run["procs"].index(check) < min(run["procs"].index(p) for p in ranks)   # checked first


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_sites_settings_reach_every_rank(dry_run, name):
    """Every [[export]] and LD_LIBRARY_PATH as the job's shell set them. One exception, the one
    course/labs/*/launchers.toml states: horovodrun hands its ranks the interface it was given
    (the job prints it) as NCCL_SOCKET_IFNAME, in place of the profile's."""
    run = dry_run[name]
    want = dry.expected_exports(run["site"], run["root"], _import_check(run)["environ"])
    if "horovod.runner.launch" in run["rendered"] and "NCCL_SOCKET_IFNAME" in want:
        [iface] = re.findall(r"^horovodrun: -H \S+ --network-interface (\S+)$",
                             run["job"]["output"], re.M)
        want["NCCL_SOCKET_IFNAME"] = iface
    libs = [str(run["root"] / "modules" / m.replace("/", "_") / "lib") for m in run["site"]["modules"]]
    assert all(lib in want["LD_LIBRARY_PATH"].split(":") for lib in libs), want["LD_LIBRARY_PATH"]
    for p in _ranks(run):
        got = p["exports"]
        assert got == want, (p["host"], {k: (got[k], want[k]) for k in want if got[k] != want[k]})


@pytest.mark.parametrize("name", sorted(JOBS))
def test_each_local_rank_gets_the_gpu_of_the_sites_order(dry_run, name):
    """The GPU a rank computes on is cuda:<local_rank> among its visible ones (dltutor.core.device):
    with the profile's gpu_order it must be order[local_rank], else GPU local_rank. A launcher that
    cannot apply the order (DeepSpeed's runner sets CUDA_VISIBLE_DEVICES itself) must say so in the
    job's output, and its ranks then get GPU local_rank."""
    run = dry_run[name]
    order = run["site"]["gpu_order"]
    notes = re.findall(r"^note: (\S+) gives local rank r GPU r;", run["job"]["output"], re.M)
    assert not set(notes) & BINDING_LAUNCHERS, notes
    if notes:
        assert order, notes   # the note is for a site whose order is not applied
        order = []
    for p in _ranks(run):
        local = _local_rank(p["ids"])
        visible = (p["cuda_visible_devices"] or "").split(",") if p["cuda_visible_devices"] else []
        gpu = int(visible[local % len(visible)]) if visible else local
        assert gpu == (order[local] if order else local), (p["host"], p["ids"], visible, order)


@pytest.mark.parametrize("name", sorted(n for n in JOBS if JOBS[n][0] == "polaris"))
def test_mpiexec_places_ranks_as_the_profile_says(dry_run, name):
    run = dry_run[name]
    mpiexec = [c[1].split() for c in run["calls"] if c[0] == "mpiexec"]
    if "mpiexec -n" not in run["rendered"]:
        assert not mpiexec, mpiexec
        return
    [argv] = mpiexec
    flags = {f: argv[argv.index(f) + 1] for f in ("-n", "--ppn", "--depth") if f in argv}
    assert flags == {"-n": str(run["nodes"]), "--ppn": "1",
                     "--depth": str(run["site"]["cpus_per_task"])}, argv


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_script_names_the_account_and_suits_its_scheduler(dry_run, name):
    run = dry_run[name]
    dropped, rendered = run["dropped"], run["rendered"]
    assert any(d in (f"--account={ACCOUNT}", f"-A {ACCOUNT}") for d in dropped), dropped
    if run["site"]["scheduler"] == "pbs":
        calls = re.findall(r"(?m)^[^#].*\b(?:srun|scontrol)\s+(?:show|-).*$", rendered)
        assert not calls, calls   # a PBS job has neither: its nodes come from $PBS_NODEFILE


@pytest.mark.parametrize("name", sorted(NO_COURSE))
def test_an_env_without_the_course_stops_the_job_before_any_rank(dry_run, name):
    run = dry_run[name]
    job, env = run["job"], dry.env_path(run["site"], run["root"])
    assert job["state"] == "FAILED" and job["code"] != "0:0", (job["state"], job["code"])
    errors = [ln for ln in job["output"].splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and str(env) in errors[0] and "README" in errors[0], job["output"][-3000:]
    assert not _ranks(run) and not job["metrics"], [p["argv"] for p in run["procs"]]


def test_the_translation_refuses_what_it_does_not_know(tmp_path):
    with pytest.raises(ValueError, match="cannot translate the PBS directive"):
        dry.translate("#!/bin/bash\n#PBS -l ngpus=4\n", tmp_path)
    text, dropped = dry.translate("#!/bin/bash\n#SBATCH --gres=gpu:4\nls /eagle/x /work/y\n", tmp_path)
    assert dropped == ["--gres=gpu:4"] and f"ls {tmp_path}/eagle/x /work/y" in text, text
