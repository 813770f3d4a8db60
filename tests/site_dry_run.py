"""The site dry-run tier's pieces (tests/test_site_dry_run.py): a site's job script, as rendered,
made runnable on the test Slurm, and the records its stand-ins leave.

What the test cluster cannot be, and only that, is translated or stood in for:

  resources   `#SBATCH` --partition/-p, --account/-A, --qos/-q, --constraint/-C, --gres, --gpus*,
              --exclusive dropped (each recorded); --cpus-per-task -> 1, OMP_NUM_THREADS=N -> 1 (2
              cores run every job at once). A PBS script's `#PBS` lines become `#SBATCH` ones:
              -N -> --job-name, -l select=N -> --nodes=N, -l walltime -> --time; -q, -A, -j,
              -l filesystems/place recorded and dropped; any other `#PBS` line is refused. After the
              directives a preamble makes what PBS gives a job: PBS_NODEFILE (one host per node,
              from `scontrol show hostnames "$SLURM_JOB_NODELIST"`), PBS_JOBID, PBS_O_WORKDIR.
  host names  the profile's master_addr_suffix (JSC's InfiniBand names, jwb0001 -> jwb0001i) taken
              off the MASTER_ADDR and horovodrun PEER lines: a test node has one name.
  file systems  the variables a centre sets at login (CENTRE_VARS: SCRATCH, WORK, PSCRATCH...)
              point to folders under the site's own root in tmp; absolute site paths in the script
              (SITE_PATHS: /eagle/..., /soft/..., /p/...) are moved under that root.
  commands    site_stubs/centre.bash, given to the job as BASH_ENV (non-interactive bash sources
              it): `module`, `conda`, `jutil` as recording shell functions (`jutil env activate -p
              X` exports SCRATCH and PROJECT as JSC's does, JUTIL_VARS). site_stubs/bin/mpiexec,
              first on PATH: records its arguments, starts the ranks with srun, each with PALS's
              PMI_RANK/PMI_SIZE/PMI_LOCAL_RANK/PALS_LOCAL_RANKID/PALS_NODEID; unknown flags refused.
  the course  installed at the site's expanded `env` path: a symlink to this suite's own
              environment (sys.prefix). It stands in for the README's portal route, `make setup
              VENV=<env>` (a 10-minute install); a profile that activates any other path finds no
              environment there. The job's PATH is the system's and the stand-ins': without the
              activation `python` is missing (or a system one without the course).
  records     the stand-ins' calls (calls.tsv); site_stubs/sitecustomize.py, on the job's
              PYTHONPATH: one JSON line per Python process of the job (processes.jsonl), the ranks
              marked. Nothing else of the job is changed.
"""
from __future__ import annotations

import getpass
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

STUBS = Path(__file__).resolve().parent / "site_stubs"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The variables each centre's login shell sets, as folders under the site's dry-run root: TACC's
# $SCRATCH and $WORK (https://docs.tacc.utexas.edu/hpc/frontera/, file systems; the same on
# Lonestar6 and Vista), NERSC's $PSCRATCH = $SCRATCH and $CFS (https://docs.nersc.gov/filesystems/);
# JSC sets $PROJECT and $SCRATCH only in `jutil env activate -p <project>`
# (https://apps.fz-juelich.de/jsc/hps/juwels/environment.html); ALCF names its paths (/eagle/...).
CENTRE_VARS = {"frontera": {"SCRATCH": "scratch", "WORK": "work"},
               "lonestar6": {"SCRATCH": "scratch", "WORK": "work"},
               "vista": {"SCRATCH": "scratch", "WORK": "work"},
               "perlmutter": {"SCRATCH": "pscratch", "PSCRATCH": "pscratch", "CFS": "global/cfs/cdirs"},
               "polaris": {},
               "juwels": {}}
JUTIL_VARS = {"PROJECT": "p/project1/{project}", "SCRATCH": "p/scratch/{project}"}   # centre.bash
SITE_PATHS = ("/eagle", "/soft", "/lus", "/p", "/global", "/pscratch")
_SITE_PATH = re.compile(r"(?<![\w./])(%s)(?=/)" % "|".join(re.escape(p) for p in SITE_PATHS))
_DROP_SBATCH = ("--partition", "-p", "--account", "-A", "--qos", "-q", "--constraint", "-C",
                "--gres", "--gpus-per-node", "--gpus", "--gpus-per-task", "--exclusive")
_PBS_DROP = (r"-q \S+", r"-A \S+", r"-j \S+", r"-l filesystems=\S+", r"-l place=\S+")
_NAMED_HOSTS = ("export MASTER_ADDR=", "PEER=")   # lines that append master_addr_suffix to a host
PBS_PREAMBLE = """\
# site dry-run: what PBS gives a job, from the Slurm job that stands in for it
export PBS_JOBID="$SLURM_JOB_ID.dryrun-pbs" PBS_O_WORKDIR="$SLURM_SUBMIT_DIR"
export PBS_NODEFILE="$SLURM_SUBMIT_DIR/pbs-nodefile-$SLURM_JOB_ID"
scontrol show hostnames "$SLURM_JOB_NODELIST" > "$PBS_NODEFILE\""""


def map_paths(text: str, root: Path) -> str:
    """Absolute site paths (SITE_PATHS) moved under `root`."""
    return _SITE_PATH.sub(lambda m: f"{root}{m.group(1)}", text)


def _sbatch(line: str, dropped: list) -> str | None:
    opt = line.split(None, 1)[1].strip()
    name = opt.split("=", 1)[0].split(None, 1)[0]
    if name in _DROP_SBATCH:
        dropped.append(opt)
        return None
    if name in ("--cpus-per-task", "-c"):
        dropped.append(opt)
        return "#SBATCH --cpus-per-task=1"
    return line


def _pbs(line: str, dropped: list) -> str | None:
    opt = line.split(None, 1)[1].strip()
    if (m := re.fullmatch(r"-N (\S+)", opt)):
        return f"#SBATCH --job-name={m.group(1)}"
    if (m := re.fullmatch(r"-l select=(\d+)(:\S+)?", opt)):
        dropped.extend([m.group(2)[1:]] if m.group(2) else [])
        return f"#SBATCH --nodes={m.group(1)}"
    if (m := re.fullmatch(r"-l walltime=(\S+)", opt)):
        return f"#SBATCH --time={m.group(1)}"
    if any(re.fullmatch(p, opt) for p in _PBS_DROP):
        dropped.append(opt)
        return None
    raise ValueError(f"the site dry-run cannot translate the PBS directive {line!r}")


def translate(script: str, root: Path, suffix: str = "") -> tuple[str, list[str]]:
    """(the job script for the test Slurm, what was dropped or scaled); see the module docstring.
    `suffix`: the profile's master_addr_suffix, taken off the host names the script builds."""
    lines, dropped, directives_end, pbs = [], [], 0, False
    for line in script.splitlines():
        if suffix and line.startswith(_NAMED_HOSTS) and line.endswith(f"){suffix}"):
            dropped.append(f"{line.split('=', 1)[0]}...{suffix}")
            line = line[:-len(suffix)]
        if line.startswith(("#SBATCH", "#PBS")):
            pbs = pbs or line.startswith("#PBS")
            line = _sbatch(line, dropped) if line.startswith("#SBATCH") else _pbs(line, dropped)
            directives_end = len(lines) + (line is not None)
        if line is not None:
            lines.append(line)
    if pbs:
        lines[directives_end:directives_end] = ["#SBATCH --output=%x-%j.out", PBS_PREAMBLE]
    text = "\n".join(lines) + "\n"
    threads = re.findall(r"OMP_NUM_THREADS=\d+", text)
    dropped += [t for t in threads if t != "OMP_NUM_THREADS=1"]
    return map_paths(re.sub(r"OMP_NUM_THREADS=\d+", "OMP_NUM_THREADS=1", text), root), dropped


def centre_vars(key: str, root: Path) -> dict:
    """The variables the centre's login shell gives a job: USER, and CENTRE_VARS under `root`."""
    login = {name: str(root / sub) for name, sub in CENTRE_VARS[key].items()}
    return {"USER": getpass.getuser(), **login}


def env_path(site: dict, root: Path) -> Path:
    """The profile's `env` as its job expands it: site paths mapped, the centre's variables (and
    JSC's after `jutil env activate`) filled; one clear error for a variable the tier cannot fill."""
    names = centre_vars(site["key"], root)
    for line in site["setup"]:   # JSC: `jutil env activate -p <project>` sets JUTIL_VARS
        if line.startswith("jutil env activate -p "):
            project = line.split()[-1]
            names.update({n: str(root / p.format(project=project)) for n, p in JUTIL_VARS.items()})
    text = re.sub(r"\$\{?(\w+)\}?", lambda m: names.get(m.group(1), m.group(0)),
                  map_paths(site["env"], root))
    if "$" in text or not text.startswith("/"):
        raise ValueError(f"{site['key']}: env {site['env']!r} gives {text!r}: the dry-run tier "
                         "knows no value for it (tests/site_dry_run.py CENTRE_VARS)")
    return Path(text)


def install_stubs(where: Path) -> Path:
    """A copy of site_stubs/ with its commands executable; its folder."""
    dest = where / "site_stubs"
    shutil.copytree(STUBS, dest, ignore=shutil.ignore_patterns("__pycache__"))
    for path in (dest / "bin" / "mpiexec", dest / "pals_rank"):
        path.chmod(0o755)
    return dest


def prepare_job(job_dir: Path, stubs: Path, site: dict, root: Path) -> dict:
    """The job's record folder (sitecustomize.py, names.json) and the environment sbatch passes on."""
    py = job_dir / "py"
    py.mkdir(parents=True)
    shutil.copy(stubs / "sitecustomize.py", py)
    (py / "names.json").write_text(json.dumps(export_names(site)))
    (job_dir / "calls.tsv").touch()
    return {**centre_vars(site["key"], root), "PATH": f"{stubs / 'bin'}:{SYSTEM_PATH}",
            "PYTHONPATH": str(py), "BASH_ENV": str(stubs / "centre.bash"),
            "DRYRUN_CALLS": str(job_dir / "calls.tsv"), "DRYRUN_SITE_ROOT": str(root),
            "LD_LIBRARY_PATH": str(root / "system" / "lib")}


def export_names(site: dict) -> list[str]:
    return list(dict.fromkeys([e["name"] for e in site["export"]] + ["LD_LIBRARY_PATH"]))


def calls(job_dir: Path) -> list[tuple[str, str, str]]:
    """The stand-ins' calls: (command, arguments, VIRTUAL_ENV at the call)."""
    rows = (job_dir / "calls.tsv").read_text().splitlines()
    return [tuple(row.split("\t")) for row in rows]


def processes(job_dir: Path) -> list[dict]:
    path = job_dir / "py" / "processes.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def expected_calls(site: dict, root: Path, environ: dict) -> list[tuple[str, str]]:
    """The module loads and the profile's set-up commands that the stand-ins answer, in order, with
    the job's variables and paths filled in."""
    lines = [f"module load {m}" for m in site["modules"]] + list(site["setup"])
    found = []
    for line in lines:
        words = shlex.split(re.sub(r"\$\{?(\w+)\}?", lambda m: environ.get(m.group(1), m.group(0)),
                                   map_paths(line, root)))
        if words and words[0] in ("module", "conda", "jutil"):
            found.append((words[0], " ".join(words[1:])))
    return found


def _dq(text: str) -> str:
    return re.sub(r'([\\"`])', r"\\\1", text)


def expected_exports(site: dict, root: Path, environ: dict) -> dict:
    """Each export_names() value as the job's shell sets it: the profile's [[export]] lines, paths
    mapped, evaluated by bash in `environ` (the job's environment before those lines)."""
    names = export_names(site)
    lines = [f'export {e["name"]}="{_dq(map_paths(e["value"], root))}"' for e in site["export"]]
    body = "\n".join(lines + ['for n in "$@"; do printf "%s\\0" "${!n}"; done'])
    env = {k: v for k, v in environ.items() if k != "BASH_ENV"}
    r = subprocess.run(["bash", "-c", body, "bash", *names], env=env, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return dict(zip(names, r.stdout.split("\0")))
