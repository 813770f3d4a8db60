"""dltutor.launch.run: real multi-process launches on gloo, fault injection, and the command builders.

Every launch is given a unique TEST_TAG variable; after it, no live process may still carry it.
Each real launch runs twice: with backend 'local' (the warm start: ranks forked from a server
that has torch imported, dltutor.launch.warm) and with 'torchrun'. The warm start's own cases
(state that must not leak, the server's life, the same losses bit for bit) are in test_warm.py.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest

from dltutor.core import env as dlenv
from dltutor.launch import run as L
from dltutor.launch.results import LaunchError, LaunchTimeout
from dltutor.launch.run import get_backend
from dltutor.launch.processes import clean_env
from dltutor.launch.backends import HorovodBackend, PythonBackend, TorchrunBackend

LAB = Path(__file__).parent / "scripts" / "tiny_lab.py"      # imports torch, uses gloo
LIGHT = Path(__file__).parent / "scripts" / "light_rank.py"  # no torch: fast fault tests
REPO = Path(__file__).resolve().parents[1]
BACKENDS = ["local", "torchrun"]          # 'local' is the warm start
LAUNCHER_NAME = {"local": "warm", "torchrun": "torchrun"}


def tagged(tag):
    """Live (non-zombie) processes whose environment carries TEST_TAG=tag."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("TEST_TAG") == tag:
                found.append(p)
        except (psutil.Error, OSError):
            pass
    return found


@pytest.fixture
def tag():
    value = uuid.uuid4().hex
    yield value
    assert tagged(value) == [], "processes outlived the launch"


def crash_time(log: Path) -> float:
    return float(re.search(r"CRASH_AT (\S+)", log.read_text()).group(1))


# ---- real launches ------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_two_ranks_all_reduce_metrics_logs_and_prefixed_output(tmp_path, tag, capsys, backend):
    result = L.launch(LAB, backend=backend, nproc=2, args=["--lines", "3"], log_dir=tmp_path / "run",
                      env={"TEST_TAG": tag}, timeout=120)
    out = capsys.readouterr().out
    assert result.returncode == 0
    assert [m["rank"] for m in result.metrics] == [0, 1]
    assert result.metric("total") == [3.0, 3.0]          # 1 + 2, summed by all_reduce
    assert result.metric("world_size") == [2, 2]
    assert result.metric("launcher") == [LAUNCHER_NAME[backend]] * 2
    assert result.backend == LAUNCHER_NAME[backend]
    if backend == "local":                                 # the cell says which launcher ran
        assert "[warm] 2 rank(s) forked from the warm start (torch already imported)" in out
    assert result.metric("omp") == [str(dlenv.threads_per_rank(2))] * 2
    assert result.metric("master_addr") == ["127.0.0.1"] * 2
    for rank in (0, 1):
        log = result.logs[rank].read_text()
        assert f"line 2 from rank {rank}" in log and "stderr line" in log
        assert "hello world_size=2" in log and "[rank" not in log   # stored without prefixes
        assert f"[rank {rank}] line 2 from rank {rank}" in out
        assert f"[rank {rank}] hello world_size=2" in out
        assert "DLTUTOR_METRICS" in log                     # kept in the log, not in the cell
    assert "DLTUTOR_METRICS" not in out
    assert "[rank 1] [rank 1]" not in out                  # dist.rank_print defers to launch
    assert not str(result.log_dir).startswith(str(REPO))


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_busy_port_is_retried_on_another_port(tmp_path, tag, monkeypatch, capsys, backend):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    ports = [taken]
    real = L.free_port
    monkeypatch.setattr(L, "free_port", lambda: ports.pop(0) if ports else real())
    try:
        result = L.launch(LIGHT, backend=backend, nproc=2, log_dir=tmp_path / "run", env={"TEST_TAG": tag},
                          timeout=120, echo=False)
    finally:
        busy.close()
    assert ports == []                                     # the busy port was tried first
    port = result.metric("master_port")[0]
    assert int(port) != taken and str(port) in result.command
    assert result.metric("master_port") == [port] * 2


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_crashed_rank_is_named_within_30s(tmp_path, tag, backend):
    # rank 1 raises after init; rank 0 is then blocked in an all_reduce it can never finish
    with pytest.raises(LaunchError) as info:
        L.launch(LAB, backend=backend, nproc=2, args=["--mode", "crash", "--rank", "1"], log_dir=tmp_path / "run",
                 env={"TEST_TAG": tag}, timeout=120, echo=False)
    raised = time.time()
    err = info.value
    assert err.ranks == [1]                                # not rank 0, which only lost a peer
    assert str(err).startswith("rank 1 failed")
    assert "rank 1 fails on purpose" in str(err)           # the tail of rank 1's log
    assert raised - crash_time(tmp_path / "run" / "rank1.log") < 30
    assert err.result.returncode != 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_ranks_aborted_while_exiting_after_reporting_keep_their_results(tmp_path, tag, capsys, backend):
    """gloo's teardown race (SIGABRT, "terminate called without an active exception") after
    every rank reported: the results are returned, with a WARNING that says so."""
    result = L.launch(LIGHT, backend=backend, nproc=2, args=["--mode", "abort-at-exit", "--rank", "1"],
                      log_dir=tmp_path / "run", env={"TEST_TAG": tag}, timeout=120, echo=False)
    assert result.returncode != 0 and [m["rank"] for m in result.metrics] == [0, 1]
    out = capsys.readouterr().out      # rank 0 was still exiting: torchrun stopped it
    assert ("WARNING: rank 0, 1 had reported its results; then rank 1 was aborted while "
            "exiting") in out, out


def test_results_are_kept_when_the_launcher_is_too_slow_to_stop_the_exiting_ranks(tmp_path, tag,
                                                                                  capsys, monkeypatch):
    """The same teardown race under a launcher slower than FAILURE_GRACE (torchrun on 2 busy
    cores): dltutor stops the ranks itself, and the results, all reported, are still kept."""
    monkeypatch.setattr(L, "FAILURE_GRACE", 0.0)        # the watchdog stops the ranks at once
    result = L.launch(LIGHT, backend="torchrun", nproc=2, args=["--mode", "abort-at-exit", "--rank", "1"],
                      log_dir=tmp_path / "run", env={"TEST_TAG": tag}, timeout=120, echo=False)
    assert [m["rank"] for m in result.metrics] == [0, 1]
    assert "then rank 1 was aborted while exiting" in capsys.readouterr().out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rank_aborted_before_reporting_is_a_failure(tmp_path, tag, backend):
    with pytest.raises(LaunchError) as info:
        L.launch(LIGHT, backend=backend, nproc=2, args=["--mode", "abort-early", "--rank", "1"],
                 log_dir=tmp_path / "run", env={"TEST_TAG": tag}, timeout=120, echo=False)
    assert info.value.ranks == [1], str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkilled_rank_is_named(tmp_path, tag, backend):
    # rank 1 is SIGKILLed (as by the OOM killer); torchrun SIGTERMs rank 0, which was waiting
    with pytest.raises(LaunchError) as info:
        L.launch(LAB, backend=backend, nproc=2, args=["--mode", "sigkill", "--rank", "1"], log_dir=tmp_path / "run",
                 env={"TEST_TAG": tag}, timeout=120, echo=False)
    assert info.value.ranks == [1] and str(info.value).startswith("rank 1 failed"), str(info.value)


def test_blame_under_torchrun_keeps_a_sigkilled_rank():
    from dltutor.launch.results import blame_ranks
    codes, quiet = {0: -15, 1: -9}, (lambda r: "")   # rank 0 stopped by torchrun, 1 killed
    assert blame_ranks(codes, quiet, TorchrunBackend.stop_codes) == [1]
    assert blame_ranks(codes, quiet) == [0, 1]       # srun's rule: both could be srun's doing


def test_a_watchdog_stop_before_the_launchers_summary_still_keeps_the_results(tmp_path):
    """The race of the test above: the watchdog kills torchrun before it prints which rank exited
    with which code; rank 1's last line (the C++ runtime's abort message) says it was SIGABRT."""
    from dltutor.launch.results import TEARDOWN_ABORT, aborted_after_reporting, watchdog_codes
    tails = {0: ["done"], 1: ["done", TEARDOWN_ABORT]}
    codes = watchdog_codes(2, TorchrunBackend.stop_codes[0], tails)
    assert codes == {0: TorchrunBackend.stop_codes[0], 1: -6}
    warning = aborted_after_reporting(codes, tails, [{"rank": 0}, {"rank": 1}], TorchrunBackend(), tmp_path)
    assert "then rank 1 was aborted while exiting" in warning
    assert not aborted_after_reporting(codes, tails, [{"rank": 0}], TorchrunBackend(), tmp_path)


def warm_servers_of(pid: int) -> list:
    """Live warm-start servers started by process `pid` (they carry DLTUTOR_WARM_OWNER=pid)."""
    found = []
    for p in psutil.process_iter():
        try:
            if (p.status() != psutil.STATUS_ZOMBIE
                    and p.environ().get("DLTUTOR_WARM_OWNER") == str(pid)):
                found.append(p)
        except (psutil.Error, OSError):
            pass
    return found


def server_folders(servers) -> list:
    """The folder of each warm server's socket (its last argument), with its server.log."""
    found = [Path(p.cmdline()[-1]).parent for p in servers]
    assert all(f.name.startswith("dltutor-warm-") and f.is_dir() for f in found), found
    return found


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_kernel_takes_its_whole_launch_with_it(tmp_path, tag, how, backend):
    # the "kernel" is a python process running launch(); it is killed as a restart or cull would
    marker = tmp_path / "up"
    code = (f"from dltutor.launch.run import launch; launch({str(LIGHT)!r}, nproc=2, "
            f"args=['--mode', 'sleep', '--ignore-term', '--marker', {str(marker)!r}], "
            f"env={{'TEST_TAG': {tag!r}}}, timeout=600, echo=False, backend={backend!r})")
    kernel = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.time() + 90
        while not all(Path(f"{marker}.{r}").exists() for r in (0, 1)):
            assert time.time() < deadline and kernel.poll() is None, "the ranks never came up"
            time.sleep(0.2)
        assert len(tagged(tag)) >= 3                      # the launcher and both ranks
        assert len(warm_servers_of(kernel.pid)) == (backend == "local")
        folders = server_folders(warm_servers_of(kernel.pid))
        kernel.send_signal(how)
        kernel.wait(timeout=10)
        gone_by = time.time() + 10
        while (tagged(tag) or warm_servers_of(kernel.pid)) and time.time() < gone_by:
            time.sleep(0.2)
        assert tagged(tag) == [], f"still running 10 s after the kernel died: {tagged(tag)}"
        assert warm_servers_of(kernel.pid) == [], "the warm start server outlived its kernel"
        assert [f for f in folders if f.exists()] == [], "the warm server's folder was left in /tmp"
    finally:
        if kernel.poll() is None:
            kernel.kill()


@pytest.mark.slow
def test_a_real_jupyter_kernel_killed_mid_launch_leaves_nothing(tmp_path, tag):
    """The same, through a real ipykernel (its own threads, its own signal handling): a cell
    launches with the default backend (the warm start) and the kernel is SIGKILLed mid-launch."""
    from jupyter_client.manager import start_new_kernel
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        marker = tmp_path / "up"
        kc.execute(f"from dltutor.launch.run import launch\nlaunch({str(LIGHT)!r}, nproc=2, "
                   f"args=['--mode', 'sleep', '--marker', {str(marker)!r}], "
                   f"env={{'TEST_TAG': {tag!r}}}, timeout=600)")
        deadline = time.time() + 120
        while not all(Path(f"{marker}.{r}").exists() for r in (0, 1)):
            assert time.time() < deadline and km.is_alive(), "the ranks never came up"
            time.sleep(0.2)
        kernel = km.provisioner.process.pid
        assert len(tagged(tag)) >= 3 and len(warm_servers_of(kernel)) == 1
        folders = server_folders(warm_servers_of(kernel))
        os.kill(kernel, signal.SIGKILL)
        gone_by = time.time() + 15
        while (tagged(tag) or warm_servers_of(kernel)) and time.time() < gone_by:
            time.sleep(0.2)
        assert tagged(tag) == [] and warm_servers_of(kernel) == [], "left behind by the kernel"
        assert [f for f in folders if f.exists()] == [], "the warm server's folder was left in /tmp"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_watchdog_kills_ranks_that_ignore_sigterm(tmp_path, tag, monkeypatch, backend):
    monkeypatch.setattr(L, "TERM_GRACE", 1.0)
    # torchrun waits 30 s before SIGKILL on a rank that ignores SIGTERM; the watchdog does not
    with pytest.raises(LaunchError) as info:
        L.launch(LIGHT, backend=backend, nproc=2, args=["--mode", "crash", "--rank", "1", "--ignore-term"],
                 log_dir=tmp_path / "run", env={"TEST_TAG": tag}, timeout=120, echo=False)
    raised = time.time()
    assert info.value.ranks == [1]
    assert "killed them" in str(info.value)
    assert raised - crash_time(tmp_path / "run" / "rank1.log") < 30


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_timeout_kills_everything_and_names_running_ranks(tmp_path, tag, monkeypatch, backend):
    monkeypatch.setattr(L, "TERM_GRACE", 1.0)              # rank 1 ignores SIGTERM: SIGKILL
    with pytest.raises(LaunchTimeout) as info:
        L.launch(LIGHT, backend=backend, nproc=2, args=["--mode", "hang", "--rank", "1", "--ignore-term",
                                       "--marker", str(tmp_path / "up")],
                 log_dir=tmp_path / "run", env={"TEST_TAG": tag}, timeout=20, echo=False)
    assert (tmp_path / "up.1").exists(), "rank 1 never started: raise the timeout"
    # rank 0 finishes at once on an idle machine; on a loaded one it may still be starting at the
    # deadline (CI saw that): the ranks named are those that had not written their end marker
    still_running = [r for r in (0, 1) if not (tmp_path / f"up.{r}.done").exists()]
    assert 1 in still_running
    assert info.value.ranks == still_running
    assert "[1]" in str(info.value)
    assert info.value.result.logs[1].exists()


class _Stream:
    """A stand-in for the cell's sys.stdout that notices a line as soon as it is printed."""

    def __init__(self, wanted):
        self.text, self.wanted, self.seen = "", wanted, threading.Event()

    def write(self, s):
        self.text += s
        if self.wanted in self.text:
            self.seen.set()
        return len(s)

    def flush(self):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_interrupt_streams_live_then_kills_everything(tmp_path, tag, monkeypatch, backend):
    # The interrupt is sent only after a rank's line has reached the "cell": so output is live.
    stream = _Stream("[rank 0] line 1 from rank 0")
    monkeypatch.setattr(sys, "stdout", stream)
    # A kernel turns SIGINT into KeyboardInterrupt; a test run started in the background of a
    # non-interactive shell inherits SIGINT ignored, so install the kernel's behaviour here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    counted = []

    def press_stop():
        if stream.seen.wait(200):
            counted.append(len(tagged(tag)))
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_stop, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        L.launch(LIGHT, backend=backend, nproc=2, args=["--mode", "hang", "--rank", "0"], log_dir=tmp_path / "run",
                 env={"TEST_TAG": tag}, timeout=240)
    signal.signal(signal.SIGINT, previous)
    assert counted and counted[0] >= 2                     # launcher + ranks were running


@pytest.mark.slow
def test_python_backend_one_process_ignores_kernel_slurm_vars(tmp_path, tag, monkeypatch):
    # A Jupyter kernel running inside a Slurm job carries these; the lab must not believe them.
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    result = L.launch(LIGHT, nproc=1, backend="python", threads=1, log_dir=tmp_path / "run",
                      env={"TEST_TAG": tag}, timeout=120, echo=False)
    assert result.metrics == [{"rank": 0, "world_size": 1, "host": socket.gethostname(),
                               "launcher": "single", "master_port": None, "omp": "1"}]
    assert result.command[1:] == ["-u", str(LIGHT)]
    assert "line 1 from rank 0" in result.logs[0].read_text()


# ---- bad input: one clear error each, nothing started ------------------------------------

@pytest.mark.parametrize("kwargs, exc, message", [
    (dict(nproc=0), ValueError, "nproc must be a positive integer"),
    (dict(nproc=-2), ValueError, "nproc must be a positive integer"),
    (dict(nproc="2"), ValueError, "nproc must be a positive integer"),
    (dict(args="--tiny"), TypeError, "args must be a list"),
    (dict(args=None), TypeError, "args must be a list"),
    (dict(timeout=0), ValueError, "timeout must be a positive"),
    (dict(timeout=-1.0), ValueError, "timeout must be a positive"),
    (dict(backend="mpi-magic"), ValueError, "unknown backend 'mpi-magic'"),
    (dict(backend="python", nproc=2), ValueError, "exactly one process"),
])
def test_bad_input(kwargs, exc, message, monkeypatch):
    monkeypatch.setattr(L.subprocess, "Popen", None)       # nothing may be started
    with pytest.raises(exc, match=message):
        L.launch(LAB, **kwargs)


def test_missing_script(tmp_path, monkeypatch):
    monkeypatch.setattr(L.subprocess, "Popen", None)
    with pytest.raises(FileNotFoundError, match="no such script: .*nope.py"):
        L.launch(tmp_path / "nope.py", nproc=2)


# ---- command builders and parsers ---------------------------------------------------------

def test_torchrun_command(tmp_path):
    cmd, extra = TorchrunBackend().command("/x/lab.py", 3, ["--tiny"], port=29123,
                                           log_dir=tmp_path, python="/venv/bin/python")
    assert cmd[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "3"
    assert cmd[cmd.index("--master-addr") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--master-port") + 1] == "29123"
    assert cmd[cmd.index("--tee") + 1] == "3"
    assert cmd[-2:] == ["/x/lab.py", "--tiny"]


def test_horovod_command(tmp_path):
    cmd, extra = HorovodBackend().command("/x/lab.py", 2, ["--tiny", "--epochs", "1"], port=None,
                                          log_dir=tmp_path, python=sys.executable)
    assert Path(cmd[0]).name == "horovodrun"
    assert cmd[1:] == ["-np", "2", "-H", "localhost:2", "--gloo", sys.executable, "-u",
                       "/x/lab.py", "--tiny", "--epochs", "1"]
    assert extra == {}


def test_line_parsers():
    tr, hv, py = TorchrunBackend(), HorovodBackend(), PythonBackend()
    assert tr.split("[rank1]:hello") == (1, "hello")
    assert tr.split("[rank0]:[rank0]: Traceback (most recent call last):") == (
        0, "Traceback (most recent call last):")
    assert tr.split("W1122 torchrun warning") == (None, "W1122 torchrun warning")
    assert hv.split("[1]<stdout>:loss 0.5") == (1, "loss 0.5")
    assert hv.split("[0,3]<stderr>:oops") == (3, "oops")
    assert py.split("anything") == (0, "anything")


def test_failure_parsers():
    summary = ("Failures:\n[1]:\n  time      : t\n  host      : h\n  rank      : 1 (local_rank: 1)"
               "\n  exitcode  : -9 (pid: 7)\nRoot Cause (first observed failure):\n[0]:\n"
               "  time      : t\n  host      : h\n  rank      : 0 (local_rank: 0)\n"
               "  exitcode  : 1 (pid: 6)\n")
    assert TorchrunBackend().failures(summary) == {0: 1, 1: -9}
    assert TorchrunBackend().port_clash("DistNetworkError: ... name: EADDRINUSE, message: x")
    assert HorovodBackend().failures("Process 1 exit with status code 134.") == {1: 134}


def test_local_backends_drop_inherited_rank_variables():
    env = clean_env({"SLURM_PROCID": "0", "RANK": "3", "PATH": "/bin", "SLURM_JOB_ID": "9"},
                    get_backend("local"))
    assert env == {"PATH": "/bin", "SLURM_JOB_ID": "9"}


def test_free_port_is_bindable():
    port = L.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_more_ranks_than_cores_or_gpus_is_refused_unless_asked(monkeypatch, tmp_path):
    from dltutor.core import device, env
    from dltutor.launch.processes import check_capacity
    monkeypatch.setattr(env, "cpu_cores", lambda: 2)
    monkeypatch.setattr(device, "gpu_count", lambda: 0)
    with pytest.raises(ValueError, match="64 ranks on 2 CPU core.*oversubscribe=True"):
        L.launch(LAB, nproc=64, args=[], log_dir=tmp_path / "logs")
    assert not (tmp_path / "logs").exists()          # refused before anything started
    check_capacity(64, oversubscribe=True)            # asked for explicitly: allowed
    check_capacity(2)
    monkeypatch.setattr(device, "gpu_count", lambda: 1)
    with pytest.raises(ValueError, match="2 ranks on a node with 1 GPU"):
        check_capacity(2)
