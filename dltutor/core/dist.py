"""Inside a launched task: who am I, join the process group, print and report, tear down.

A lab script calls `ctx = dist.init()` (or `with dist.session() as ctx:`) and gets its rank,
local rank, world size and device from whichever launcher started it:

  torchrun     RANK / LOCAL_RANK / WORLD_SIZE (+ MASTER_ADDR / MASTER_PORT)
  horovodrun   HOROVOD_RANK / HOROVOD_LOCAL_RANK / HOROVOD_SIZE (the script calls hvd.init())
  mpiexec      OMPI_COMM_WORLD_* (Open MPI) or PMI_RANK / PMI_SIZE + PALS_LOCAL_RANKID (PBS, Cray)
  srun         SLURM_PROCID / SLURM_LOCALID / SLURM_STEP_NUM_TASKS (only inside an srun step:
               a batch script and a Jupyter server started as a job have SLURM_PROCID=0 and the
               job's SLURM_NTASKS, but no SLURM_STEP_ID: they are one process, not rank 0 of N)
  python       none of these: one process, no process group

The order matters: an mpiexec or torchrun started inside a Slurm job still sees the job's
SLURM_PROCID=0, so the launcher that started *this* process is checked first. Only a launched
task reads these variables; the Jupyter kernel never does (see dltutor.launch.run).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta

from dltutor.core import device as _device
from dltutor.core import env as _env
from dltutor.core import rendezvous
from dltutor.core.hosts import hosts_line, job_first_node, rank_hosts

# Set by dltutor.launch.run, which prefixes every line with the rank itself.
PREFIXED_ENV = "DLTUTOR_RANK_PREFIXED"
TIMEOUT_ENV = "DLTUTOR_DIST_TIMEOUT"
METRICS_TAG = "DLTUTOR_METRICS"


@dataclass(frozen=True)
class DistContext:
    rank: int
    local_rank: int
    world_size: int
    device: object  # torch.device
    is_distributed: bool
    launcher: str = "single"  # torchrun|warm|horovod|mpi|pbs|slurm|single|group_of_one
    backend: str | None = None  # the torch.distributed backend in use, if any

    @property
    def is_main(self) -> bool:
        return self.rank == 0


_CTX: DistContext | None = None


def _int(environ, *names, default=None):
    for name in names:
        value = environ.get(name)
        if value not in (None, ""):
            return int(value)
    return default


# Variables that tell a process its rank. The kernel may carry them (a Jupyter server running as
# a Slurm job has SLURM_PROCID=0, SLURM_NTASKS=...); a local launch must not hand them to ranks,
# or `detect` below would believe them. Keep in step with `detect`.
RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
            "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
            "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
            "SLURM_STEP_NUM_TASKS", "SLURM_STEP_ID", "PMI_RANK", "PMI_SIZE", "PALS_LOCAL_RANKID",
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE")


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free on `host` right now (bind to port 0, let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _job_port(job_id) -> int:
    """A port every task of one job agrees on, below the ephemeral range (32768+)."""
    return 20000 + int(re.sub(r"\D", "", str(job_id)) or 0) % 10000


def detect(environ=None) -> dict:
    """Rank, local rank, world size, launcher and rendezvous address from `environ` (default
    os.environ). Pure: starts nothing, changes nothing."""
    e = os.environ if environ is None else environ
    info = None
    if "RANK" in e and "WORLD_SIZE" in e:  # torchrun's variables (also the warm start's)
        info = dict(launcher="warm" if e.get("DLTUTOR_WARM_START") else "torchrun", rank=_int(
                    e, "RANK"), world_size=_int(e, "WORLD_SIZE"), local_rank=_int(e, "LOCAL_RANK", default=0),
                    local_world_size=_int(e, "LOCAL_WORLD_SIZE"))
    elif "HOROVOD_RANK" in e and "HOROVOD_SIZE" in e:
        info = dict(launcher="horovod", rank=_int(e, "HOROVOD_RANK"),
                    world_size=_int(e, "HOROVOD_SIZE"),
                    local_rank=_int(e, "HOROVOD_LOCAL_RANK", default=0),
                    local_world_size=_int(e, "HOROVOD_LOCAL_SIZE"))
    elif "OMPI_COMM_WORLD_RANK" in e:
        info = dict(launcher="mpi", rank=_int(e, "OMPI_COMM_WORLD_RANK"),
                    world_size=_int(e, "OMPI_COMM_WORLD_SIZE"),
                    local_rank=_int(e, "OMPI_COMM_WORLD_LOCAL_RANK", default=0),
                    local_world_size=_int(e, "OMPI_COMM_WORLD_LOCAL_SIZE"))
    elif "PMI_RANK" in e and "PMI_SIZE" in e:
        info = dict(launcher="pbs", rank=_int(e, "PMI_RANK"), world_size=_int(e, "PMI_SIZE"),
                    local_rank=_int(e, "PALS_LOCAL_RANKID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK",
                                    default=0),
                    local_world_size=_int(e, "PALS_LOCAL_SIZE", "MPI_LOCALNRANKS"))
    elif "SLURM_PROCID" in e and "SLURM_STEP_ID" in e:  # a task of an srun step, not the batch
        # script itself nor a Jupyter server running as a job (they have no SLURM_STEP_ID)
        info = dict(launcher="slurm", rank=_int(e, "SLURM_PROCID"),
                    world_size=_int(e, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
                    local_rank=_int(e, "SLURM_LOCALID", default=0), local_world_size=None)
    if info is None:
        return dict(launcher="single", rank=0, world_size=1, local_rank=0, local_world_size=1,
                    master_addr=None, master_port=None)
    if info["local_world_size"] is None:
        info["local_world_size"] = info["world_size"]
    addr, port = e.get("MASTER_ADDR"), e.get("MASTER_PORT")
    if info["launcher"] == "slurm":
        addr = addr or job_first_node(e)
        port = port or _job_port(e.get("SLURM_JOB_ID") or e.get("SLURM_JOBID") or 0)
    elif info["launcher"] in ("pbs", "mpi") and not addr:
        nodefile = e.get("PBS_NODEFILE")
        if nodefile and os.path.exists(nodefile):
            with open(nodefile) as fh:
                addr = fh.readline().strip() or None
        if not addr and info["local_world_size"] == info["world_size"]:
            addr = "127.0.0.1"  # every rank on this node
        port = port or _job_port(e.get("PBS_JOBID", 0))
    info.update(master_addr=addr, master_port=int(port) if port else None)
    return info


def init(backend: str | None = None, timeout: float | None = None,
         group_of_one: bool = False, use_cuda: bool = True) -> DistContext:
    """Join the process group the launcher set up and return this task's `DistContext`.

    Run as plain `python lab.py` it returns a single-process context and starts no group, unless
    `group_of_one` (an engine such as DeepSpeed needs a group even alone): then it starts a group
    of one on a free 127.0.0.1 port, so the engine never goes looking for MPI.
    The device is cuda:<local_rank> when a GPU is visible and `use_cuda` (a lab's `--no-cuda`
    passes False), else the CPU; `backend` defaults to the one matching it (nccl / gloo);
    `timeout` (seconds) bounds every collective, default `$DLTUTOR_DIST_TIMEOUT` or 300.
    """
    global _CTX
    import torch
    import torch.distributed as tdist

    if _CTX is not None:
        return _CTX
    info = detect()
    if info["launcher"] == "single" and group_of_one:
        info = {**info, "launcher": "group_of_one", "master_addr": "127.0.0.1",
                "master_port": free_port()}
    # Libraries (and dltutor.core.device.device) read these names: make them true for every launcher.
    for key, value in (("RANK", info["rank"]), ("LOCAL_RANK", info["local_rank"]),
                       ("WORLD_SIZE", info["world_size"]),
                       ("LOCAL_WORLD_SIZE", info["local_world_size"]),
                       ("MASTER_ADDR", info["master_addr"]), ("MASTER_PORT", info["master_port"])):
        if value is not None and info["launcher"] != "single":
            os.environ.setdefault(key, str(value))
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(_env.threads_per_rank(info["local_world_size"]))
    device = _device.device(use_cuda, info["local_rank"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    pg_backend = None
    # Horovod scripts call hvd.init(); every other launcher gets a torch process group.
    if info["launcher"] not in ("single", "horovod"):
        if not info["master_addr"] or not info["master_port"]:
            raise RuntimeError(
                f"dltutor.core.dist.init: launched by {info['launcher']} with {info['world_size']} "
                "ranks but MASTER_ADDR/MASTER_PORT are not set and cannot be derived; "
                "export them in the job script")
        pg_backend = backend or _device.backend(device)
        seconds = timeout if timeout is not None else float(os.environ.get(TIMEOUT_ENV, 300))
        if not tdist.is_initialized():
            rendezvous.check(info)  # an unresolvable MASTER_ADDR, a taken MASTER_PORT: one message
            tdist.init_process_group(pg_backend, init_method="env://", rank=info["rank"],
                                     world_size=info["world_size"],
                                     timeout=timedelta(seconds=seconds))
    _CTX = DistContext(rank=info["rank"], local_rank=info["local_rank"],
                       world_size=info["world_size"], device=device,
                       is_distributed=info["launcher"] not in ("single", "group_of_one"),
                       launcher=info["launcher"], backend=pg_backend)
    return _CTX


def context() -> DistContext | None:
    return _CTX  # the context from init(), or None before it


def _rank_world() -> tuple[int, int]:
    if _CTX is not None:
        return _CTX.rank, _CTX.world_size
    info = detect()
    return info["rank"], info["world_size"]


def rank_print(*args, main_only: bool = False, **kwargs) -> None:
    """`print` with a `[rank N]` prefix (only on rank 0 when `main_only`); none under
    dltutor.launch.run, whose launcher already prefixes every line."""
    rank, _ = _rank_world()
    if main_only and rank != 0:
        return
    kwargs.setdefault("flush", True)
    if os.environ.get(PREFIXED_ENV) == "1":
        print(*args, **kwargs)
    else:
        print(f"[rank {rank}]", *args, **kwargs)


def print_hosts(gather=None) -> list[str]:
    """Every rank's host name, printed once by rank 0 (a collective: every rank must call it)."""
    hosts = rank_hosts(gather)
    rank_print(hosts_line(hosts), main_only=True)
    return hosts


def _plain(value):
    if hasattr(value, "tolist"):  # torch tensors, numpy arrays and scalars
        return value.tolist()
    return str(value)


def report(**metrics) -> dict:
    """Print one `DLTUTOR_METRICS {json}` line (rank, world_size and the rank's host added);
    launch() parses it."""
    rank, world = _rank_world()
    record = {"rank": rank, "world_size": world, "host": socket.gethostname(), **metrics}
    sys.stdout.write(f"{METRICS_TAG} {json.dumps(record, default=_plain)}\n")
    sys.stdout.flush()
    return record


def read_report(line: str) -> dict | None:
    """The metrics of one `DLTUTOR_METRICS {json}` line (what `report` printed), else None."""
    if not line.startswith(METRICS_TAG + " "):
        return None
    try:
        record = json.loads(line[len(METRICS_TAG) + 1:])
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def seed(seed: int = 0) -> int:
    """Seed python/numpy/torch with `seed + rank`, so each rank draws different data."""
    rank, _ = _rank_world()
    return _env.seed_everything(seed, rank)


def teardown() -> None:
    """Leave the process group (safe to call twice, or without init)."""
    global _CTX
    _CTX = None
    if "torch" in sys.modules:
        import torch.distributed as tdist
        if tdist.is_available() and tdist.is_initialized():
            tdist.destroy_process_group()
            if sys.exc_info()[0] is None:  # a clean end: leave without the C++ teardown
                from dltutor.core import rank_exit
                rank_exit.arm()


@contextlib.contextmanager
def session(backend: str | None = None, timeout: float | None = None, use_cuda: bool = True):
    """`with dist.session() as ctx:` — init, then teardown however the block ends.

    A normal end waits at a barrier first, so no rank tears its group down while a peer still
    runs (seen: gloo aborts at exit, "terminate called without an active exception"); a block
    that raises tears down at once, so the launcher sees the failure."""
    try:
        ctx = init(backend=backend, timeout=timeout, use_cuda=use_cuda)
        yield ctx
        if ctx.backend is not None:
            import torch.distributed as tdist
            tdist.barrier()
    finally:
        teardown()
