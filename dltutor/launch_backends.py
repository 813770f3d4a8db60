"""Back ends for `dltutor.launch`: each one only builds a command and reads its output.

A back end knows three things about its launcher:
  * `command(...)`   the argv that starts `nproc` ranks of a script (plus extra env),
  * `split(line)`    which rank wrote a line of the launcher's output (None: the launcher itself),
  * `failures(text)` / `port_clash(text)` what the launcher's own messages say went wrong.
Starting, streaming, watching, timing out and cleaning up are common to all of them and live in
`dltutor.launch`. To add one, subclass `Backend` and register it in `BACKENDS`.
The process helpers at the end (free port, tagged processes) are shared by all back ends.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# Variables that tell a process its rank. The kernel may carry them (a Jupyter server running as
# a Slurm job has SLURM_PROCID=0, SLURM_NTASKS=...); a local launch must not hand them to ranks,
# or dltutor.dist would believe them. Keep in step with dltutor.dist.detect().
RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
            "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
            "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS",
            "SLURM_STEP_NUM_TASKS", "PMI_RANK", "PMI_SIZE", "PALS_LOCAL_RANKID",
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE")

TAG_ENV = "DLTUTOR_LAUNCH_ID"  # every process of one launch carries it (how nothing is orphaned)
_RANK_VARS = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")

# What a rank says when it only died because another rank vanished from a collective.
_PEER_LOST = re.compile(r"closed by peer|reset by peer|remote worker|Broken pipe|"
                        r"communicator was aborted|DistNetworkError|timed out|Timeout|"
                        r"Horovod has been shut down", re.I)


def lost_peer(log_tail: str) -> bool:
    """True when a rank's last lines show it failed because a peer went away."""
    return bool(_PEER_LOST.search(log_tail))


def blame_ranks(codes: dict, tail_of) -> list[int]:
    """The ranks to blame among the failed ones ({rank: exit code, -9/-15 killed/terminated}):
    not those that only lost a peer (`tail_of(rank)` = its last lines) nor those the launcher
    stopped after another failed, unless nothing else is left."""
    failed = sorted(codes)
    own = [r for r in failed if not lost_peer(tail_of(r))]
    return [r for r in own if codes[r] not in (-9, -15)] or own or failed


class Backend:
    name = "base"
    needs_port = False   # True: launch() picks a free 127.0.0.1 port and passes it in
    local = True         # True: rank variables inherited from the kernel are removed

    def check(self, nproc: int) -> None:
        """Raise ValueError for an nproc this back end cannot run."""

    def command(self, script: str, nproc: int, args: list[str], *, port: int | None,
                log_dir: Path, python: str = sys.executable) -> tuple[list[str], dict]:
        raise NotImplementedError

    def split(self, line: str) -> tuple[int | None, str]:
        return None, line

    def failures(self, launcher_text: str) -> dict[int, int]:
        """{rank: exit code} of the ranks the launcher says failed (negative: killed by signal)."""
        return {}

    def port_clash(self, launcher_text: str) -> bool:
        return False

    def failure_seen(self, line: str) -> bool:
        """True when a launcher line says a rank has failed (starts the watchdog's clock)."""
        return False


class TorchrunBackend(Backend):
    """`python -m torch.distributed.run` on this machine, static rendezvous on 127.0.0.1.

    `--tee 3` copies each rank's stdout and stderr into `<log_dir>/torchrun/.../<rank>/` and onto
    torchrun's own stdout/stderr with the prefix `[rank<N>]:`, which `split` takes off again.
    """
    name = "local"
    needs_port = True
    _line = re.compile(r"^\[rank(\d+)\]:(.*)$", re.S)
    # torchrun's first words after a worker fails: it stops the others, then reports.
    _failed = re.compile(r"closing signal SIG|failed \(exitcode: -?\d+\) local_rank: \d+")
    _summary = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")

    def check(self, nproc):
        if nproc > 64:
            raise ValueError(f"nproc={nproc} local ranks is more than this launcher allows (64)")

    def command(self, script, nproc, args, *, port, log_dir, python=sys.executable):
        cmd = [python, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", str(nproc), "--master-addr", "127.0.0.1",
               "--master-port", str(port), "--max-restarts", "0",
               "--log-dir", str(Path(log_dir) / "torchrun"), "--tee", "3",
               "--log-line-prefix-template", "[rank${rank}]:", script, *args]
        return cmd, {}

    def split(self, line):
        m = self._line.match(line)
        if not m:
            return None, line
        rank, text = int(m.group(1)), m.group(2)
        # torch prefixes uncaught tracebacks with "[rankN]:" itself: show it once.
        return rank, re.sub(rf"^\[rank{rank}\]:\s?", "", text)

    def failures(self, launcher_text):
        return {int(r): int(code) for r, code in self._summary.findall(launcher_text)
                if int(code) != 0}

    def port_clash(self, launcher_text):
        return "EADDRINUSE" in launcher_text or "address already in use" in launcher_text

    def failure_seen(self, line):
        return bool(self._failed.search(line))


class PythonBackend(Backend):
    """One plain `python script.py` process: no torchrun, no process group (rank 0 of 1)."""
    name = "python"

    def check(self, nproc):
        if nproc != 1:
            raise ValueError(f"backend='python' runs exactly one process, not nproc={nproc}; "
                             "use backend='local' for several ranks")

    def command(self, script, nproc, args, *, port, log_dir, python=sys.executable):
        return [python, "-u", script, *args], {}

    def split(self, line):
        return 0, line


class HorovodBackend(Backend):
    """`horovodrun -np N -H localhost:N --gloo python script.py` (Horovod's own rendezvous).

    horovodrun prefixes each rank's lines with `[<rank>]<stdout>:` (Gloo) or
    `[<job>,<rank>]<stdout>:` (MPI) and prints `Process <rank> exit with status code <n>.`
    """
    name = "horovod"
    _line = re.compile(r"^\[(?:\d+,)?(\d+)\]<(?:stdout|stderr)>:(.*)$", re.S)
    _failed = re.compile(r"Process (\d+) exit with status code (-?\d+)")

    @staticmethod
    def executable(python=sys.executable) -> str:
        """horovodrun next to `python` (the venv's), else the one on PATH, else the bare name."""
        beside = Path(python).with_name("horovodrun")
        return str(beside) if beside.exists() else (shutil.which("horovodrun") or "horovodrun")

    def command(self, script, nproc, args, *, port, log_dir, python=sys.executable):
        return [self.executable(python), "-np", str(nproc), "-H", f"localhost:{nproc}",
                "--gloo", python, "-u", script, *args], {}

    def split(self, line):
        m = self._line.match(line)
        return (int(m.group(1)), m.group(2)) if m else (None, line)

    def failures(self, launcher_text):
        return {int(r): int(code) for r, code in self._failed.findall(launcher_text)
                if code != "0"}

    def failure_seen(self, line):
        return bool(self._failed.search(line))


# 'slurm' (dltutor.slurm.SlurmBackend: srun inside an allocation, sbatch outside) is registered
# lazily by get_backend, because dltutor.slurm imports this module.
BACKENDS: dict[str, Backend] = {
    "local": TorchrunBackend(), "torchrun": TorchrunBackend(),
    "python": PythonBackend(), "horovod": HorovodBackend(),
}


def get_backend(name) -> Backend:
    """A registered back end by name, or a Backend instance as given (e.g. SlurmBackend(site=...))."""
    if isinstance(name, Backend):
        return name
    if name == "slurm" and "slurm" not in BACKENDS:
        from dltutor.slurm import SlurmBackend  # lazy: dltutor.slurm imports this module
        BACKENDS["slurm"] = SlurmBackend()      # site from $DLTUTOR_SITE, default 'local'
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}") from None


def clean_env(base: dict, backend: Backend) -> dict:
    """`base` without inherited rank variables (for back ends that start ranks locally)."""
    env = dict(base)
    if backend.local:
        for key in RANK_ENV:
            env.pop(key, None)
    return env


def script_path(script) -> str:
    path = Path(os.fspath(script)).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"launch: no such script: {path}")
    return str(path.resolve())


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free on `host` right now (bind to port 0, let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tagged_processes(tag: str) -> list:
    """Live processes that carry DLTUTOR_LAUNCH_ID=tag (zombies are already dead: skipped)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get(TAG_ENV) == tag:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            pass
    return found


def rank_of(proc) -> int | None:
    """The rank a running process was started as (from its environment), or None."""
    try:
        environ = proc.environ()
    except (psutil.Error, OSError):
        return None
    for name in _RANK_VARS:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    return None


# ---------------------------------------------------------------- what a launch returns or raises
class LaunchError(RuntimeError):
    """A launch failed; `ranks` are the ranks to blame (first = most likely root cause)."""

    def __init__(self, message, ranks=(), result=None):
        super().__init__(message)
        self.ranks = list(ranks)
        self.result = result


class LaunchTimeout(LaunchError):
    """The overall timeout passed; `ranks` are the ranks that were still running."""


@dataclass
class LaunchResult:
    returncode: int
    wall_time: float
    metrics: list = field(default_factory=list)
    logs: dict = field(default_factory=dict)   # rank -> Path of its log (stdout + stderr)
    command: list = field(default_factory=list)
    log_dir: Path | None = None
    backend: str = "local"

    def metric(self, name):
        """One metric from every rank that reported it, in rank order."""
        return [m[name] for m in self.metrics if name in m]
