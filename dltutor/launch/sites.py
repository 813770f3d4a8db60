"""Site profiles and job scripts: nothing site-specific lives in code.

A site profile (course/labs/sites/<name>.toml) holds the partition (or PBS queue), GPUs per node,
CPUs per task, modules, setup lines, scratch path, account placeholder and launcher form of one
centre. Job scripts are templates (course/labs/slurm/*.sbatch.tmpl, course/labs/pbs/*.pbs.tmpl)
using string.Template with `@{name}` placeholders, so the job shell's own `$VARS` stay untouched;
the launch line comes from course/labs/slurm/launchers.toml (srun, torchrun per node, mpiexec).

    print(render_job("perlmutter", "course/labs/02_ddp/train.py", nodes=2))

`${DLTUTOR_ACCOUNT}`-style placeholders are filled from the environment when set; otherwise they
stay visible in the script and `dltutor.launch.slurm.submit` refuses to submit it.
"""
from __future__ import annotations

import os
import re
import shlex
import string
import sys
import tomllib
from dltutor.core import course



class _Template(string.Template):
    delimiter = "@"   # `$` belongs to the job's shell


def _expand(value):
    """`${DLTUTOR_...}` placeholders from the environment; unset ones stay for submit() to refuse."""
    if isinstance(value, str):
        return re.sub(r"\$\{(DLTUTOR_\w+)\}", lambda m: os.environ.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def list_sites() -> list[str]:
    return sorted(p.stem for p in (course.lab("sites")).glob("*.toml"))


def load_site(name: str) -> dict:
    """The site profile `course/labs/sites/<name>.toml`, with `${DLTUTOR_*}` filled from the env."""
    path = course.lab("sites") / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"no site profile {name!r}; known: {', '.join(list_sites())}")
    site = {"key": name, "scheduler": "slurm", "partition": "", "gpus_per_node": 0,
            "cpus_per_task": 1, "account": "", "modules": [], "setup": [], "scratch": "/tmp",
            "launcher": "srun", "python": "python", "directives": [], "master_addr_suffix": ""}
    site.update(tomllib.loads(path.read_text()))
    return {k: _expand(v) for k, v in site.items()}


def _dq(text: str) -> str:
    """Escape for the inside of a shell double-quoted string."""
    return re.sub(r'([\\"$`])', r"\\\1", text)


def render_job(site, script, nodes: int = 1, tasks_per_node: int | None = None, args=(),
               time: str = "00:10:00", job_name: str = "dltutor", output: str | None = None,
               launcher: str | None = None, python: str | None = None) -> str:
    """The batch script that runs `script` on `nodes` x `tasks_per_node` ranks at `site`.

    `site` is a profile name or a dict from `load_site`. One node uses the single-node template,
    more the multi-node one (MASTER_ADDR from `scontrol show hostnames`), unless the profile names
    its own `template` (PBS sites must). `launcher` ('srun', 'torchrun', 'mpiexec') overrides the
    profile's; torchrun gets one Slurm task per node holding all of that node's ranks' CPUs.
    """
    site = load_site(site) if isinstance(site, str) else site
    nodes = int(nodes)
    tpn = int(tasks_per_node or site["gpus_per_node"] or 1)
    if nodes < 1 or tpn < 1:
        raise ValueError(f"nodes and tasks_per_node must be >= 1 (got {nodes}, {tpn})")
    launcher = launcher or site["launcher"]
    launchers = tomllib.loads((course.lab("slurm/launchers.toml")).read_text())
    if launcher not in launchers:
        raise ValueError(f"unknown launcher {launcher!r}; choose one of {sorted(launchers)}")
    pbs = site["scheduler"] == "pbs"
    cpt = int(site["cpus_per_task"])
    python = python or site["python"] or sys.executable
    quoted_script, quoted_args = shlex.quote(str(script)), " ".join(shlex.quote(str(a)) for a in args)
    if launcher == "torchrun":  # one task per node holding all of the node's ranks' CPUs
        sb_tpn, sb_cpt = 1, tpn * cpt
        quoted_script, quoted_args, python = _dq(quoted_script), _dq(quoted_args), _dq(python)
    else:
        sb_tpn, sb_cpt = tpn, cpt
    values = dict(site_name=site.get("name", site["key"]), job_name=job_name, nodes=nodes,
                  tasks_per_node=tpn, ntasks=nodes * tpn, cpus_per_task=cpt, time=time,
                  sbatch_tasks_per_node=sb_tpn, sbatch_cpus_per_task=sb_cpt, launcher=launcher,
                  output=output or "%x-%j.out", scratch=site["scratch"], master_addr_suffix=site["master_addr_suffix"],
                  python=python, script=quoted_script, args=quoted_args)
    tag = "#PBS" if pbs else "#SBATCH"
    lines = []
    if site["partition"]:
        lines.append(f"{tag} -q {site['partition']}" if pbs else
                     f"#SBATCH --partition={site['partition']}")
    if site["account"]:
        lines.append(f"{tag} -A {site['account']}" if pbs else f"#SBATCH --account={site['account']}")
    lines += [f"{tag} {d}" for d in site["directives"]]
    values["directives"] = "\n".join(lines)
    setup = [f"module load {m}" for m in site["modules"]] + list(site["setup"])
    values["setup"] = "\n".join(setup) if setup else "# (no modules to load at this site)"
    values["launch"] = _Template(launchers[launcher]).substitute(values).rstrip()
    name = site.get("template") or f"slurm/{'single' if nodes == 1 else 'multi'}_node.sbatch.tmpl"
    if pbs and not name.endswith(".pbs.tmpl"):
        raise ValueError(f"site {site['key']!r} runs PBS: its profile must name a PBS `template`")
    return _Template((course.lab(name)).read_text()).substitute(values)
