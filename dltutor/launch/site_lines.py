"""The lines of a job script that come from its site profile (dltutor.launch.sites renders them).

  setup()            modules, the site's own set-up lines, the course environment activated and
                     checked (`import dltutor`, one clear error before any rank starts), then the
                     centre's settings for every rank (`[[export]]`, each with its source page)
  default_launcher() the launcher a lab gets at a site: horovodrun for Horovod (built with Gloo:
                     only horovodrun starts its ranks), else the profile's
  launch_form()      the launch line of that launcher for the site's scheduler (Slurm forms in
                     course/labs/slurm/launchers.toml, PBS forms in course/labs/pbs/launchers.toml);
                     a launcher the scheduler cannot run is refused in one line
  launch_values()    what the launch line's placeholders are filled with
"""
from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from dltutor.core import course

SSH_LAUNCHERS = ("horovodrun", "deepspeed")   # they start other nodes' ranks over ssh / pdsh
BINDS = ("srun", "mpiexec", "horovodrun")     # the forms whose ranks start through gpu_bind
LAB_LAUNCHER = {"03_horovod": "horovodrun"}   # lab folder: the launcher its engine needs
FORMS = {"slurm": "slurm/launchers.toml", "pbs": "pbs/launchers.toml"}
# what the deepspeed launcher writes into DS_ENV_FILE for its pdsh-started ranks (besides the
# profile's own [[export]] names): over pdsh a rank gets nothing else of the job's environment
DS_ENV_NAMES = ("DLTUTOR_[A-Za-z0-9_]+", "OMP_NUM_THREADS", "NCCL_[A-Za-z0-9_]+", "FI_[A-Za-z0-9_]+",
                "LD_LIBRARY_PATH")
ENV_MISSING = ("error: no course environment at $DLTUTOR_ENV: install the course there first (README, "
               "'On an HPC portal': make setup VENV=$DLTUTOR_ENV)")
NO_DLTUTOR = ("error: $(command -v {python}) cannot import dltutor (see above): {fix} (README, 'On an "
              "HPC portal')")
FIX = {True: "install the course into $DLTUTOR_ENV (make setup VENV=$DLTUTOR_ENV)",
       False: "set the site profile's env to the course environment, or render the job with "
              "python= that environment's Python"}


def _dq(text: str, dollar: bool = True) -> str:
    """Escape for the inside of a shell double-quoted string (`dollar=False`: `$` expands)."""
    return re.sub(r'([\\"$`])' if dollar else r'([\\"`])', r"\\\1", str(text))


def forms(scheduler: str) -> dict:
    return tomllib.loads(course.lab(FORMS.get(scheduler, FORMS["slurm"])).read_text())


def default_launcher(script, site: dict) -> str:
    return LAB_LAUNCHER.get(Path(str(script)).parent.name, site["launcher"])


def launch_form(site: dict, launcher: str, nodes: int = 1) -> str:
    if nodes > 1 and launcher in SSH_LAUNCHERS and site.get("ssh_between_nodes") is False:
        raise ValueError(f"{site['key']}: {launcher} starts the ranks of the other nodes over ssh, "
                         f"which this centre does not allow jobs by default "
                         f"({site.get('ssh_source', site.get('docs', ''))}): run it on one node, "
                         "or start the ranks with srun (for Horovod: a Horovod built with MPI)")
    known = forms(site["scheduler"])
    if launcher in known:
        return known[launcher]
    if any(launcher in forms(other) for other in FORMS if other != site["scheduler"]):
        raise ValueError(f"launcher {launcher!r} cannot start ranks in a {site['scheduler']} job "
                         f"at {site['key']}; choose one of {sorted(known)}")
    raise ValueError(f"unknown launcher {launcher!r}; choose one of {sorted(known)}")


def setup(site: dict, python: str) -> str:
    """Modules, set-up lines, the environment activated and checked, the settings for every rank."""
    lines = [f"module load {m}" for m in site["modules"]] + list(site["setup"])
    env = site["env"]
    if env:
        lines += [f"# the course environment (README, 'On an HPC portal'){_source(site, 'env')}",
                  f'DLTUTOR_ENV="{_dq(env, dollar=False)}"',
                  'if [ -f "$DLTUTOR_ENV/bin/activate" ]; then source "$DLTUTOR_ENV/bin/activate"   # a venv',
                  'elif [ -d "$DLTUTOR_ENV/conda-meta" ]; then export PATH="$DLTUTOR_ENV/bin:$PATH"   # conda',
                  f'else echo "{ENV_MISSING}" >&2; exit 1; fi']
    lines.append(f'{python} -P -c "import dltutor, sys; print(\'course environment:\', sys.prefix)" '
                 f'|| {{ echo "{NO_DLTUTOR.format(python=python, fix=FIX[bool(env)])}" >&2; exit 1; }}')
    exports = list(site["export"])
    if site["gpu_order"]:
        exports.append({"name": "DLTUTOR_GPU_ORDER", "value": ",".join(map(str, site["gpu_order"])),
                        "source": site.get("gpu_order_source", "")})
    if exports:
        lines.append(f"# {site.get('name', site['key'])}'s settings for every rank")
    for e in exports:
        src = f"   # {e['source']}" if e.get("source") else ""
        lines.append(f'export {e["name"]}="{_dq(e["value"], dollar=False)}"{src}')
    return "\n".join(lines)


def _source(site: dict, key: str) -> str:
    return f": {site[key + '_source']}" if site.get(key + "_source") else ""


def binding_note(site: dict, launcher: str) -> str:
    """An echo line for a job whose launcher cannot apply the site's GPU order, else ''."""
    if not site["gpu_order"] or launcher in BINDS:
        return ""
    order = ",".join(map(str, site["gpu_order"]))
    return (f'echo "note: {launcher} gives local rank r GPU r; the GPU order of '
            f'{site.get("name", site["key"])} ({order}) is applied by {", ".join(BINDS)} only"\n')


def launch_values(site: dict, script, args, python: str, launcher: str, nodes: int, tpn: int,
                  cpt: int) -> dict:
    """The launch line's placeholders: ranks and CPUs (torchrun: one task per node holding all of
    its ranks' CPUs), the quoted script and arguments, the GPU binding, what DeepSpeed carries."""
    quoted_script = shlex.quote(str(script))
    quoted_args = " ".join(shlex.quote(str(a)) for a in args)
    if launcher == "torchrun":   # the line is evaluated again by `bash -c "..."` on each node
        sb_tpn, sb_cpt = 1, tpn * cpt
        quoted_script, quoted_args, python = _dq(quoted_script), _dq(quoted_args), _dq(python)
    else:
        sb_tpn, sb_cpt = tpn, cpt
    bind = f"{python} -m dltutor.launch.gpu_bind " if site["gpu_order"] and launcher in BINDS else ""
    ds_names = [*DS_ENV_NAMES, *(re.escape(e["name"]) for e in site["export"]   # those no prefix
                                 if not any(re.fullmatch(p, e["name"]) for p in DS_ENV_NAMES))]
    return dict(tasks_per_node=tpn, ntasks=nodes * tpn, cpus_per_task=cpt, launcher=launcher,
                sbatch_tasks_per_node=sb_tpn, sbatch_cpus_per_task=sb_cpt, python=python,
                script=quoted_script, args=quoted_args, bind=bind,
                ds_env="|".join(ds_names))
