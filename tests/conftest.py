"""Test-wide settings: fast mode and offline data for every test and every notebook kernel.

Set here, at import, so that kernels started by nbval and processes started by tests inherit them.
"""
import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

os.environ["DLTUTOR_FAST"] = "1"
os.environ.setdefault("DLTUTOR_OFFLINE", "1")     # tests never fetch data from the web
os.environ.setdefault("PYTHONUNBUFFERED", "1")
# Two pytest workers share two cores: a test's torch (a notebook kernel, a test, a job's rank) gets
# one thread. Two threads on a core the other worker keeps busy spin in OpenMP's barriers:
# tests/test_train.py::test_synthetic_data_is_learnable beside one busy core took 25.7 s with two
# threads and 12.4 s with one (8.9 s alone with two). Launches set their ranks' own count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The checks the tests run keep their tries in a history of this test process, never in the
# tester's home (dltutor.grading.attempts); kernels and ranks started by the tests inherit it.
_ATTEMPTS = tempfile.mkdtemp(prefix="dltutor-attempts-")
atexit.register(shutil.rmtree, _ATTEMPTS, True)
os.environ.setdefault("DLTUTOR_ATTEMPTS", os.path.join(_ATTEMPTS, "attempts.jsonl"))

ROOT = Path(__file__).resolve().parents[1]

# DeepSpeed's CPU all-reduce buffers of a killed earlier run would hang this session's DeepSpeed runs.
from dltutor.core.engines import clear_stale_deepspeed_shm  # noqa: E402

clear_stale_deepspeed_shm()


# ---------------------------------------------------------------- the notebooks run as a student
# Run as root (`make test` in CI and on this machine), nbval runs every notebook in the kernelspec
# student_kernel.KERNEL: the course's kernel as a Unix user who owns neither the environment nor the
# course (see tests/student_kernel.py). Set up once per session by the process that runs it (xdist's
# controller, else this one); its workers inherit STUDENT_ENV and JUPYTER_PATH.
STUDENT_ENV = "DLTUTOR_TEST_STUDENT"      # the student's name, set while the session has them
_student: dict = {}


def _student_session_start(config) -> None:
    import student_kernel
    from dltutor.core import env
    entry = student_kernel.account()
    _student["home"] = home = student_kernel.make_home(entry)
    _student["jupyter"] = jupyter = Path(tempfile.mkdtemp(prefix="dltutor-kernels-"))
    spec = student_kernel.write_kernelspec(jupyter, entry, home)
    kernel_env = json.loads((spec / "kernel.json").read_text())["env"]
    reach = [sys.base_prefix, sys.prefix, env.cache_dir(), env.data_dir(), ROOT, home.parent,
             *(v for v in kernel_env.values() if os.path.isabs(v))]
    _student["granted"] = True
    student_kernel.grant_traverse([p for p in reach if os.path.exists(p)])
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(jupyter)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p])
    os.environ[STUDENT_ENV] = entry.pw_name


def pytest_configure(config):
    """As root: the student's account, rights, HOME and kernelspec (controller), and nbval's
    kernel set to it (every process) unless --nbval-kernel-name or --current-env says otherwise."""
    if os.geteuid() != 0:
        return
    if not hasattr(config, "workerinput") and STUDENT_ENV not in os.environ:
        try:
            _student_session_start(config)
        except BaseException:
            _student_session_end()
            raise
    option = config.option
    if (os.environ.get(STUDENT_ENV) and hasattr(option, "nbval_kernel_name")
            and not option.nbval_kernel_name and not getattr(option, "nbval_current_env", False)
            and not getattr(option, "current_env", False)):
        import student_kernel
        option.nbval_kernel_name = student_kernel.KERNEL


def _student_session_end() -> None:
    """The old folder modes back (when no other session holds them), the HOME and kernelspec gone."""
    import student_kernel
    if _student.pop("granted", False):
        student_kernel.release_traverse()
    for key in ("home", "jupyter"):
        if key in _student:
            shutil.rmtree(_student.pop(key), ignore_errors=True)


def pytest_unconfigure(config):
    if _student:
        _student_session_end()


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def python() -> str:
    """The interpreter of the course environment (the one running the tests)."""
    return sys.executable


# ---------------------------------------------------------------- a real two-node Slurm
SLURM_SCRIPT = ROOT / "scripts" / "slurm_local.sh"
SLURM_NODES = 2     # node1 and node2 on this machine (scripts/slurm_local.sh start --nodes 2)


def _cluster(action, *args, timeout=180):
    return subprocess.run(["bash", str(SLURM_SCRIPT), action, *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="session")
def slurm_cluster():
    """The test cluster: node1 and node2, each a slurmd (and an sshd) under its own host name and
    loopback address; started once per session, reused if already running, stopped if started."""
    missing = [t for t in ("sbatch", "srun", "slurmctld", "slurmd", "munged", "sshd", "pdsh")
               if not shutil.which(t)]
    if missing:
        pytest.fail(f"the test cluster's tools are not installed ({', '.join(missing)} missing): run "
                    "`bash scripts/setup.sh --test` (installs slurm-wlm, munge, openssh-server, "
                    "pdsh)", pytrace=False)
    started = _cluster("status").returncode != 0
    if started:
        r = _cluster("start", "--nodes", str(SLURM_NODES))
        assert r.returncode == 0, f"local Slurm did not start:\n{r.stdout}\n{r.stderr}"
    conf = re.search(r"export SLURM_CONF=(\S+)", _cluster("env").stdout).group(1)
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf   # sbatch/srun/squeue/scontrol of this process and its jobs
    yield conf
    if old is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = old
    if started:
        r = _cluster("stop")
        assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- two workers (pytest-xdist)
# `make test` runs the suite on two workers (`-n 2 --dist loadfile`): while one test waits (a rank
# starting, a job queued, a hang running into its timeout) the other computes. What must not be
# split stays together: each file on one worker (its module fixtures run once), and every user of
# the one local Slurm on the same worker, notebook 02 included (its section 5 submits a job).
SLURM_GROUP = "slurm"
USES_SLURM = {"02_ddp_multi_gpu.ipynb"}     # besides the files that ask for the slurm_cluster fixture


@functools.lru_cache(maxsize=None)
def worker_group(file: str) -> str:
    """The unit one worker runs whole: 'slurm' for every user of the local Slurm, else the file."""
    path = ROOT / file
    if path.name in USES_SLURM or (path.suffix == ".py" and path.is_file()
                                   and "slurm_cluster" in path.read_text(errors="replace")):
        return SLURM_GROUP
    return file


def scope_of(nodeid: str) -> str:
    """The worker unit of a test id (`tests/test_x.py::test_y[...]`, `course/notebooks/N.ipynb::Cell 3`)."""
    return worker_group(nodeid.split("::", 1)[0])


# The longest units first, so that the short ones fill the end of the run on both workers. Without
# this xdist orders units by their number of tests, which put the one-test browser test and the
# two-test headless lab (about 100 s together) last, alone on one worker while the other had
# finished. Their durations in a full run (pytest --durations=0, summed per unit, 2 workers):
# slurm 1100 s (of which the site dry-run tier 135-220 s; since then lab 10's requeue and node-loss
# jobs, tests/test_checkpoint_slurm.py, 150-165 s more), launch forms 660 s, test_launch 260 s,
# notebook 03 120 s, notebook 04 85 s, notebook 10 55-60 s,
# test_deepspeed_zero 85 s, test_horovod_lab 75 s, test_gpu_dryrun 70 s, test_engines 65 s,
# test_exercises 65 s, test_headless_lab 65 s, test_train 65 s, test_browser 55 s; the rest < 60 s.
LONGEST_FIRST = (SLURM_GROUP, "tests/test_launch_forms.py", "tests/test_launch.py",
                 "course/notebooks/03_horovod_synthetic_resnet50.ipynb",
                 "course/notebooks/04_deepspeed_out_of_core_bert.ipynb",
                 "course/notebooks/10_checkpoints_and_restarts.ipynb",
                 "tests/test_deepspeed_zero.py", "tests/test_horovod_lab.py",
                 "tests/test_gpu_dryrun.py", "tests/test_engines.py", "tests/test_exercises.py",
                 "tests/test_headless_lab.py", "tests/test_train.py", "tests/test_browser.py")


def pytest_collection_modifyitems(config, items):
    """The units of LONGEST_FIRST first, in that order (each unit's tests keep their order)."""
    order = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(scope_of(item.nodeid), len(order)))


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with the Slurm users of several files as one unit (see worker_group), the
    units in the order of the collection (pytest_collection_modifyitems), not by their size."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling
    config.option.loadscopereorder = False

    class FilesAndSlurm(LoadFileScheduling):
        def _split_scope(self, nodeid):
            return scope_of(nodeid)

    return FilesAndSlurm(config, log)


# ---------------------------------------------------------------- notebook times (fast mode)
NOTEBOOK_BUDGET_S = 90      # each notebook in fast mode on 2 CPU cores (reported, never asserted)


def pytest_terminal_summary(terminalreporter):
    """One line per notebook run by nbval: the sum of its cells' times, against the budget."""
    per_notebook = {}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            nodeid = getattr(rep, "nodeid", "")
            if ".ipynb::" in nodeid and getattr(rep, "when", "") == "call":
                name = nodeid.split("::")[0].rsplit("/", 1)[-1]
                per_notebook[name] = per_notebook.get(name, 0.0) + rep.duration
    if per_notebook:
        terminalreporter.section("notebook times, fast mode (sum of cells)")
        workers = terminalreporter.config.getoption("numprocesses", default=None) or 0
        if workers > 1:   # the budget is for a notebook alone on the machine
            terminalreporter.write_line(f"({workers} workers: each notebook shared the cores with "
                                        "other tests; run one alone with TEST_WORKERS=0 to compare "
                                        f"with the {NOTEBOOK_BUDGET_S} s budget)")
        for name, secs in sorted(per_notebook.items()):
            flag = f"  OVER the {NOTEBOOK_BUDGET_S} s budget" if secs > NOTEBOOK_BUDGET_S else ""
            terminalreporter.write_line(f"{secs:6.1f} s  {name}{flag}")
