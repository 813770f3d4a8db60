"""Back ends for `dltutor.launch.run`: each one only builds a command and reads its output.

A back end knows three things about its launcher:
  * `command(...)`   the argv that starts `nproc` ranks of a script (plus extra env),
  * `split(line)`    which rank wrote a line of the launcher's output (None: the launcher itself),
  * `failures(text)` / `port_clash(text)` what the launcher's own messages say went wrong.
Starting, streaming, watching, timing out and cleaning up are common to all of them and live in
`dltutor.launch.run`. To add one, subclass `Backend` and register it in `BACKENDS`.
The process helpers at the end (free port, tagged processes) are shared by all back ends.
"""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

class Backend:
    name = "base"
    needs_port = False   # True: launch() picks a free 127.0.0.1 port and passes it in
    local = True         # True: rank variables inherited from the kernel are removed
    stop_codes = (-9, -15)  # exit codes of ranks the launcher itself stopped after a failure
    names_first_only = False  # True: the launcher names only the first rank to exit (horovodrun)

    def on_nodes(self, nodes: int) -> "Backend":
        """This back end on `nodes` nodes; only Slurm's goes past this node."""
        if int(nodes) != 1:
            raise ValueError(f"nodes={nodes} needs backend='slurm' (a job across nodes); "
                             f"backend {self.name!r} starts every rank on this node")
        return self

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
    name = "torchrun"
    needs_port = True
    stop_codes = (-15,)  # torchrun stops the other ranks with SIGTERM; -9 came from elsewhere
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
               "--log-dir", str(Path(log_dir) / "torchrun"), "--tee", "3", script, *args]
        # the prefix by its variable: torchrun's --log-line-prefix-template flag is newer than
        # the variable (torch 2.11 on the H200 node printed its usage and ran no rank)
        return cmd, {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}

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


def horovod_controller_flags(on_gpu: bool, built: dict | None) -> list[str]:
    """horovodrun's controller flag: `--gloo` on the CPU, or when this Horovod has neither NCCL nor
    MPI; none on a GPU with an NCCL/MPI build (horovodrun then picks MPI when built, else Gloo,
    and GPU tensors go through NCCL). `built`: {'nccl': bool, 'mpi': bool, ...} (hvd.*_built())."""
    built = built or {}
    if on_gpu and (built.get("nccl") or built.get("mpi")):
        return []
    return ["--gloo"]


def horovod_built() -> dict:
    """What this environment's Horovod was built with (dltutor.core.engines.horovod_info)."""
    from dltutor.core.engines import horovod_info
    return horovod_info().get("details") or {}


class HorovodBackend(Backend):
    """`horovodrun -np N -H localhost:N [--gloo] python script.py` (Horovod's own rendezvous).

    `--gloo` on the CPU (and `--no-cuda` runs); on a GPU node with an NCCL or MPI build of
    Horovod the flag is left out (see `horovod_controller_flags`).

    horovodrun prefixes each rank's lines with `[<rank>]<stdout>:` (Gloo) or
    `[<job>,<rank>]<stdout>:` (MPI) and prints `Process <rank> exit with status code <n>.` for
    the first process to exit only, which may be a rank that saw Horovod shut down, not the one
    that failed: the launch counts the ranks with a traceback as failed too (`names_first_only`).
    """
    name = "horovod"
    names_first_only = True
    _line = re.compile(r"^\[(?:\d+,)?(\d+)\]<(?:stdout|stderr)>:(.*)$", re.S)
    _failed = re.compile(r"Process (\d+) exit with status code (-?\d+)")

    @staticmethod
    def executable(python=sys.executable) -> str:
        """horovodrun next to `python` (the venv's), else the one on PATH, else the bare name."""
        beside = Path(python).with_name("horovodrun")
        return str(beside) if beside.exists() else (shutil.which("horovodrun") or "horovodrun")

    def command(self, script, nproc, args, *, port, log_dir, python=sys.executable):
        from dltutor.core.device import gpu_count
        on_gpu = "--no-cuda" not in args and gpu_count() > 0
        flags = horovod_controller_flags(on_gpu, horovod_built() if on_gpu else None)
        return [self.executable(python), "-np", str(nproc), "-H", f"localhost:{nproc}",
                *flags, python, "-u", script, *args], {}

    def split(self, line):
        m = self._line.match(line)
        return (int(m.group(1)), m.group(2)) if m else (None, line)

    def failures(self, launcher_text):
        return {int(r): int(code) for r, code in self._failed.findall(launcher_text)
                if code != "0"}

    def failure_seen(self, line):
        return bool(self._failed.search(line))
