"""Site profiles and job scripts: nothing site-specific lives in code.

A site profile (course/labs/sites/<name>.toml) holds one centre's scheduler (Slurm or PBS), default
partition (or PBS queue) and the limits of each queue the course may use, GPUs per node, CPUs per
task, account, modules and set-up lines, the course environment (`env`, where the README's portal
route installs it), the NCCL/libfabric settings the centre recommends (`[[export]]`), the GPU each
local rank gets (`gpu_order`), scratch, and the launcher form; each centre-specific value names the
page it comes from. Job scripts are templates (course/labs/slurm/*.sbatch.tmpl,
course/labs/pbs/*.pbs.tmpl) using string.Template with `@{name}` placeholders, so the job shell's
own `$VARS` stay untouched; the lines they share are built in dltutor.launch.site_lines.

    print(render_job("perlmutter", "course/labs/02_ddp/train.py", nodes=2, account="m1234"))

Rendering refuses what the site would refuse later (or run wrong): an unset account, a request that
fits no queue, a launcher the scheduler cannot run.
"""
from __future__ import annotations

import os
import re
import string
import sys
import tomllib

from dltutor.core import course
from dltutor.launch import site_lines

ACCOUNT_VAR = "DLTUTOR_ACCOUNT"


class _Template(string.Template):
    delimiter = "@"   # `$` belongs to the job's shell


def _expand(value, extra=None):
    """`${DLTUTOR_...}` placeholders from `extra` or the environment; unset ones stay."""
    env = {**os.environ, **(extra or {})}
    if isinstance(value, str):
        return re.sub(r"\$\{(DLTUTOR_\w+)\}", lambda m: env.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [_expand(v, extra) for v in value]
    if isinstance(value, dict):
        return {k: _expand(v, extra) for k, v in value.items()}
    return value


def list_sites() -> list[str]:
    return sorted(p.stem for p in (course.lab("sites")).glob("*.toml"))


def load_site(name: str, account: str | None = None) -> dict:
    """The site profile `course/labs/sites/<name>.toml`, `${DLTUTOR_*}` filled from the environment
    (`account` fills `${DLTUTOR_ACCOUNT}` first)."""
    path = course.lab("sites") / f"{name}.toml"
    if not path.is_file():
        raise ValueError(f"no site profile {name!r}; known: {', '.join(list_sites())}")
    site = {"key": name, "scheduler": "slurm", "partition": "", "gpus_per_node": 0,
            "cpus_per_task": 1, "account": "", "modules": [], "setup": [], "scratch": "/tmp",
            "launcher": "srun", "python": "python", "directives": [], "master_addr_suffix": "",
            "env": "", "queues": {}, "export": [], "gpu_order": []}
    site.update(tomllib.loads(path.read_text()))
    return _expand(site, {ACCOUNT_VAR: account} if account else None)


def _seconds(hms: str) -> int:
    """'HH:MM:SS' or 'D-HH:MM:SS' -> seconds (one spelling that Slurm and PBS read alike)."""
    days, _, rest = str(hms).rpartition("-")
    try:
        parts, days = [int(p) for p in rest.split(":")], int(days or 0)
    except ValueError:
        parts = []
    if len(parts) != 3 or any(p < 0 for p in parts):   # Slurm reads "30" as minutes, PBS as s
        raise ValueError(f"time {hms!r}: write it as HH:MM:SS (or D-HH:MM:SS)")
    return (days * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def _limits(name: str, q: dict) -> str:
    if "max_nodes" not in q and "max_time" not in q:
        return f"{name}: {q.get('limits', 'limits not recorded')}"
    nodes = f"{q.get('min_nodes', 1)}-{q['max_nodes']}" if "max_nodes" in q else "any"
    return f"{name}: {nodes} nodes, {q.get('max_time', 'no time limit given')}"


def _fits(q: dict, nodes: int, seconds: int) -> bool:
    return (q.get("min_nodes", 1) <= nodes <= q.get("max_nodes", nodes)
            and seconds <= _seconds(q.get("max_time", "9999:00:00")))


def pick_queue(site: dict, nodes: int, time: str, queue: str | None = None) -> tuple[str, dict]:
    """(queue name, its limits): `queue` if given, else the profile's partition when it fits, else
    the first of its `queues` that does; ValueError naming the limits when none fits."""
    queues, seconds = site["queues"], _seconds(time)
    if not queues:   # a profile without limits (the test Slurm): its partition or the one asked for
        return (site["partition"] if queue is None else queue), {}
    if queue is not None and queue not in queues:
        raise ValueError(f"{site['key']}: no queue {queue!r} in its profile; known: {', '.join(queues)}")
    for name in ([queue] if queue is not None else dict.fromkeys([site["partition"], *queues])):
        if name in queues and _fits(queues[name], nodes, seconds):
            return name, queues[name]
    sources = sorted({q["source"] for q in queues.values() if q.get("source")})
    raise ValueError(f"{site['key']}: {'queue ' + queue if queue else 'no queue'} takes {nodes} "
                     f"node(s) for {time} (" + "; ".join(_limits(n, q) for n, q in queues.items())
                     + (f"; from {', '.join(sources)}" if sources else "") + ")")


def _account(site: dict) -> str:
    acct = site["account"]
    if "${" in acct:
        raise ValueError(f"{site['key']} needs your allocation (project) for the job: pass "
                         f"account='<project>' (--account on the command line) or `export "
                         f"{ACCOUNT_VAR}=<project>`, then render again")
    return acct


def render_job(site, script, nodes: int = 1, tasks_per_node: int | None = None, args=(),
               time: str = "00:10:00", job_name: str = "dltutor", output: str | None = None,
               launcher: str | None = None, python: str | None = None,
               account: str | None = None, queue: str | None = None, env: str | None = None) -> str:
    """The batch script that runs `script` on `nodes` x `tasks_per_node` ranks at `site`.

    `site` is a profile name or a dict from `load_site`. One node uses the single-node template,
    more the multi-node one, unless the profile names its own `template` (PBS sites must). The
    queue is `queue`, else the profile's partition, else the first of its queues whose limits fit
    `nodes` and `time`. `launcher` overrides the lab's default (horovodrun for lab 03, whose Horovod
    only horovodrun starts; the profile's `launcher` for the others); torchrun gets one Slurm task
    per node holding all of that node's ranks' CPUs. `account` fills `${DLTUTOR_ACCOUNT}`; `env`
    replaces the profile's course environment (a venv, or a conda environment: put first on PATH).
    """
    site = load_site(site, account) if isinstance(site, str) else _expand(
        site, {ACCOUNT_VAR: account} if account else None)
    if env is not None:
        site = {**site, "env": env}
    nodes = int(nodes)
    if nodes < 1 or (tasks_per_node is not None and int(tasks_per_node) < 1):
        raise ValueError(f"nodes and tasks_per_node must be >= 1 (got {nodes}, {tasks_per_node})")
    qname, limits = pick_queue(site, nodes, time, queue)
    tpn = int(tasks_per_node or limits.get("gpus_per_node") or site["gpus_per_node"] or 1)
    pbs = site["scheduler"] == "pbs"
    launcher = launcher or site_lines.default_launcher(script, site)
    form = site_lines.launch_form(site, launcher, nodes)
    cpt = int(site["cpus_per_task"])
    if limits.get("cpus_per_node") and tpn * cpt > limits["cpus_per_node"]:
        raise ValueError(f"{site['key']}: {tpn} rank(s) x {cpt} CPUs do not fit a node of queue "
                         f"{qname} ({limits['cpus_per_node']} CPUs): ask for fewer tasks_per_node")
    python = python or site["python"] or sys.executable
    values = site_lines.launch_values(site, script, args, python, launcher, nodes, tpn, cpt)
    values.update(site_name=site.get("name", site["key"]), job_name=job_name, nodes=nodes,
                  time=time, output=output or "%x-%j.out", scratch=site["scratch"],
                  master_addr_suffix=site["master_addr_suffix"])
    tag = "#PBS" if pbs else "#SBATCH"
    flag = site.get("queue_directive", "-q" if pbs else "--partition")   # Perlmutter: --qos
    lines = [f"{tag} {flag} {qname}" if pbs else f"#SBATCH {flag}={qname}"] if qname else []
    if site["account"]:
        acct = _account(site)
        lines.append(f"{tag} -A {acct}" if pbs else f"#SBATCH --account={acct}")
    lines += [f"{tag} {d}" for d in site["directives"]]
    if limits.get("limits"):   # a queue whose limits the profile could not record
        lines.append(f"# queue {qname}: limits {limits['limits']}; see {limits.get('source', '')}")
    values["directives"] = "\n".join(lines)
    values["setup"] = site_lines.setup(site, python)
    values["launch"] = (site_lines.binding_note(site, launcher)
                        + _Template(form).substitute(values).strip("\n")).rstrip()
    name = site.get("template") or f"slurm/{'single' if nodes == 1 else 'multi'}_node.sbatch.tmpl"
    if pbs and not name.endswith(".pbs.tmpl"):
        raise ValueError(f"site {site['key']!r} runs PBS: its profile must name a PBS `template`")
    return _Template((course.lab(name)).read_text()).substitute(values)
