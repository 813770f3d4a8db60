"""The environment doctor: one table of what this kernel (or shell) has, and what to do about gaps.

`from dltutor.doctor import doctor; doctor()` in a notebook cell and `python -m dltutor doctor` in a shell print the same
table. Rows are facts; a row whose status is `!!` is a problem and says how to fix it. The doctor
runs in the *kernel* context: it reports the Slurm/PBS allocation the Jupyter server sits in, and
never reads rank variables (those belong to launched tasks, see `dltutor.core.dist`).
"""
from __future__ import annotations

import os
import platform
import shutil
import sys
from dataclasses import dataclass

from dltutor.core import device, env
from dltutor.core.units import GiB

TORCH_PIN = "2.14.1"
OK, INFO, PROBLEM = "ok", "--", "!!"


@dataclass
class Row:
    name: str
    value: str
    status: str = OK
    fix: str = ""


def _torch_rows() -> list[Row]:
    try:
        import torch
        import torch.distributed as tdist
    except ImportError:
        return [Row("torch", "not importable", PROBLEM, "run `make setup` (or `pip install torch==2.14.1`)")]
    rows = [Row("torch", torch.__version__,
                OK if torch.__version__.split("+")[0] == TORCH_PIN else PROBLEM,
                "" if torch.__version__.startswith(TORCH_PIN) else
                f"the course is pinned to torch=={TORCH_PIN}: run `make setup` or use the course kernel")]
    cuda_build = torch.version.cuda or "none (CPU build)"
    rows.append(Row("CUDA (torch build)", cuda_build, INFO if torch.version.cuda is None else OK))
    if torch.cuda.is_available():
        names = {torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())}
        rows.append(Row("GPUs", f"{torch.cuda.device_count()} x {', '.join(sorted(names))}"))
    else:
        rows.append(Row("GPUs", "none visible: labs run on CPU with gloo", INFO,
                        "on a cluster, start the server on a GPU node to use nccl"))
    for name, check in (("gloo", tdist.is_gloo_available), ("nccl", tdist.is_nccl_available),
                        ("mpi", tdist.is_mpi_available)):
        have = bool(tdist.is_available() and check())
        status = OK if have else (PROBLEM if name == "gloo" else INFO)
        fix = "" if have else ("reinstall torch: gloo is required" if name == "gloo" else "")
        rows.append(Row(f"backend {name}", "available" if have else "not built in", status, fix))
    rows.append(Row("backend used", f"{device.backend()} on {device.device()}"))
    return rows


def horovod_rebuild_command(python: str = sys.executable) -> str:
    """The shell command that rebuilds Horovod with NCCL for `python` (scripts/build_horovod.sh)."""
    return (f"DLTUTOR_HOROVOD_NCCL=1 DLTUTOR_HOROVOD_REBUILD=1 bash scripts/build_horovod.sh {python}"
            "  (on the GPU node, with nvcc and NCCL; CUDA_HOME / HOROVOD_NCCL_HOME if not found)")


def horovod_build_row(details: dict | None, gpus: int, python: str = sys.executable) -> Row:
    """What Horovod was built with (hvd.nccl_built(), mpi_built(), gloo_built()) and whether that
    suits this node: a GPU node needs NCCL, or GPU tensors cannot go through Horovod. Pure."""
    if not details or "nccl" not in details:
        return Row("horovod build", "unknown (Horovod does not load)", INFO)
    value = ", ".join(f"{k}={'yes' if details.get(k) else 'no'}" for k in ("nccl", "mpi", "gloo"))
    if gpus and not details.get("nccl"):
        return Row("horovod build", f"{value}; {gpus} GPU(s) here", PROBLEM,
                   "GPU present, Horovod without NCCL: rebuild with " + horovod_rebuild_command(python))
    if not details.get("gloo") and not details.get("mpi"):
        return Row("horovod build", value, PROBLEM, "no controller (Gloo or MPI): rebuild Horovod")
    how = "horovodrun --gloo (CPU)" if not gpus else "horovodrun without --gloo, NCCL for GPU tensors"
    return Row("horovod build", f"{value}: {how}")


def _engine_rows() -> list[Row]:
    from dltutor.core import engines
    rows = []
    for name, info in (("horovod", engines.horovod_info()), ("deepspeed", engines.deepspeed_info())):
        if info.get("importable"):
            detail = info.get("details")
            if isinstance(detail, dict):
                detail = ", ".join(f"{k}={v}" for k, v in detail.items())
            rows.append(Row(name, f"{info.get('version')} ({detail})" if detail else str(info.get("version"))))
        else:
            rows.append(Row(name, "not importable", PROBLEM, info.get("fix") or "run `make setup`"))
        if name == "horovod" and info.get("version"):
            rows.append(horovod_build_row(info.get("details") if info.get("importable") else None,
                                          device.gpu_count()))
    return rows


def _allocation_rows() -> list[Row]:
    """Facts about the batch allocation this kernel runs in (never rank variables)."""
    rows = []
    if "SLURM_JOB_ID" in os.environ:
        keys = ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST",
                "SLURM_CPUS_ON_NODE", "SLURM_GPUS_ON_NODE")
        facts = ", ".join(f"{k[6:].lower()}={os.environ[k]}" for k in keys if k in os.environ)
        rows.append(Row("Slurm allocation", facts, INFO,
                        "labs launched from here use srun --overlap inside this allocation"))
    elif "PBS_JOBID" in os.environ:
        nodes = "?"
        nodefile = os.environ.get("PBS_NODEFILE")
        if nodefile and os.path.exists(nodefile):
            with open(nodefile) as fh:
                nodes = str(len({line.strip() for line in fh if line.strip()}))
        rows.append(Row("PBS allocation", f"job={os.environ['PBS_JOBID']}, nodes={nodes}", INFO))
    else:
        rows.append(Row("batch allocation", "none (not inside Slurm or PBS)", INFO))
    for tool in ("sbatch", "srun", "qsub"):
        if shutil.which(tool):
            rows.append(Row(f"{tool}", shutil.which(tool), INFO))
    return rows


def _data_rows() -> list[Row]:
    root = env.data_dir()
    probe = root if root.exists() else root.parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free_gb = shutil.disk_usage(probe).free / GiB
    rows = [Row("data dir", f"{root} ({free_gb:.1f} GiB free)",
                OK if free_gb > 1 else PROBLEM,
                "" if free_gb > 1 else "set DLTUTOR_DATA to a scratch directory with space")]
    try:
        from dltutor.data import staging
        facts = staging.describe()
        staged = facts.get("cifar10_present") or facts.get("staged")
        rows.append(Row("CIFAR-10", "present" if staged else "not staged", OK if staged else INFO,
                        "" if staged else "python -m dltutor data stage --from DIR (or download on a "
                        f"node with internet); else notebooks use {facts.get('fallback', 'a SYNTHETIC stand-in')}"))
    except Exception as exc:  # the doctor must always render
        rows.append(Row("CIFAR-10", f"could not check: {exc}", INFO))
    return rows


def _user_row() -> Row:
    """Your own folder (exercise work files, runs, figures): where, and whether you can write it."""
    try:
        folder = env.user_folder()
    except PermissionError as exc:
        return Row("your files", str(env.user_dir()), PROBLEM, str(exc))
    return Row("your files", f"{folder} (exercises, runs, figures: yours alone)")


def collect(engines_too: bool = True) -> list[Row]:
    """Gather every row of the doctor's table."""
    rows = [Row("python", f"{platform.python_version()} at {sys.executable}")]
    rows += _torch_rows()
    if engines_too:
        rows += _engine_rows()
    rows.append(Row("CPU cores", f"{env.cpu_cores()} usable of {os.cpu_count()}"))
    rows += _allocation_rows()
    rows += _data_rows()
    rows.append(_user_row())
    rows.append(Row("fast mode", "ON (DLTUTOR_FAST=1): small sizes, numbers are not benchmarks"
                    if env.fast_mode() else "off", INFO if env.fast_mode() else OK))
    return rows


def render(rows: list[Row]) -> str:
    width = max(len(r.name) for r in rows)
    lines = ["dltutor doctor", "-" * 60]
    for r in rows:
        lines.append(f"{r.status:2}  {r.name:<{width}}  {r.value}")
        if r.fix and r.status != OK:
            lines.append(f"{'':2}  {'':<{width}}  -> {r.fix}")
    problems = [r for r in rows if r.status == PROBLEM]
    lines.append("-" * 60)
    lines.append(f"{len(problems)} problem(s)" + (": fix the rows marked !!" if problems else ""))
    return "\n".join(lines)


def doctor(engines_too: bool = True) -> list[Row]:
    """Print the environment table and return its rows (problems are marked `!!`)."""
    rows = collect(engines_too)
    print(render(rows))
    return rows
