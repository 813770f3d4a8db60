"""The warm start (dltutor.launch.warm): what it promises beyond the launcher's own guarantees.

Those guarantees (the failing rank named, timeout, stop button, killed kernel, busy port, logs,
labelled output) are tested under the warm start and under torchrun in test_launch.py. Here: the
same losses as torchrun bit for bit, a rank that looks like a torchrun rank from inside, state
that does not leak from one launch into the next, the server's life, exit codes and tracebacks.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dltutor.launch import run as L
from dltutor.launch import warm
from dltutor.launch.results import LaunchError
from dltutor.launch.warm_rank import environ_block

HERE = Path(__file__).parent
REPO = HERE.parent
JOB = REPO / "bench" / "launch_job.py"          # 30 DDP steps of a Linear(32, 32) on gloo
STATE = HERE / "scripts" / "warm_state.py"
LIGHT = HERE / "scripts" / "light_rank.py"


def run(script, args=(), backend="local", **kw):
    kw.setdefault("timeout", 120)
    kw.setdefault("threads", 1)
    return L.launch(script, nproc=2, args=list(args), backend=backend, echo=False, **kw)


@pytest.mark.slow
def test_the_same_losses_as_torchrun_bit_for_bit(tmp_path):
    fast = run(JOB, log_dir=tmp_path / "warm")
    slow = run(JOB, backend="torchrun", log_dir=tmp_path / "torchrun")
    assert fast.backend == "warm" and slow.backend == "torchrun"
    a, b = fast.metric("losses"), slow.metric("losses")
    assert len(a) == 2 and len(a[0]) == 30
    assert a == b                                   # exact floats, every step, both ranks
    assert a[0] != a[1] and a[0][-1] < a[0][0]      # ranks see their own data; it learns


@pytest.mark.slow
def test_a_rank_sees_what_a_torchrun_rank_sees(tmp_path):
    seen = {b: run(STATE, ["--mode", "inspect", "--rank", "1"], backend=b, env={"TEST_TAG": b},
                   threads=2, log_dir=tmp_path / b).metrics for b in ("local", "torchrun")}
    for backend, ranks in seen.items():
        for m in ranks:
            assert m["name"] == "__main__" and m["argv"] == ["--mode", "inspect", "--rank", "1"]
            assert m["cwd"] == os.getcwd() and m["path0"] == str(STATE.parent)
            assert m["stdin_is_null"] is True and m["torch_threads"] == 2
            assert m["proc_rank"] == str(m["rank"]), backend      # ps/psutil see the rank...
            assert m["proc_tag"] == m["env_tag"] and m["test_tag"] == backend  # ...and the tags
    assert [m["threads"] for m in seen["local"]] == [m["threads"] for m in seen["torchrun"]]


@pytest.mark.slow
def test_a_rank_waits_for_its_non_daemon_threads_as_an_interpreter_does(tmp_path):
    for backend in ("local", "torchrun"):
        result = run(STATE, ["--mode", "thread"], backend=backend, log_dir=tmp_path / backend)
        assert result.metric("thread_done") == [True, True], backend


@pytest.mark.slow
def test_a_rank_that_changes_global_state_leaks_nothing_into_the_next_launch(tmp_path):
    first = run(STATE, ["--mode", "pollute"], log_dir=tmp_path / "a")
    server = warm.server_pid()
    assert first.metric("polluted") == [True, True] and server is not None
    after = run(STATE, ["--mode", "inspect"], log_dir=tmp_path / "b").metrics
    assert warm.server_pid() == server              # the same server forked both launches
    for m in after:
        assert not (m["leak_env"] or m["leak_module"] or m["leak_attr"] or m["leak_path"]), m
        assert m["threads"] == 1 and m["torch_threads"] == 1, m


@pytest.mark.slow
def test_the_server_is_kept_between_launches_and_started_again_if_it_died(tmp_path):
    run(LIGHT, log_dir=tmp_path / "a")
    old = warm.server_pid()
    run(LIGHT, log_dir=tmp_path / "b")
    assert warm.server_pid() == old
    os.kill(old, signal.SIGKILL)
    deadline = time.time() + 10
    while warm.running() and time.time() < deadline:
        time.sleep(0.1)
    result = run(LIGHT, log_dir=tmp_path / "c")
    assert result.returncode == 0 and warm.server_pid() not in (None, old)


@pytest.mark.slow
def test_exit_codes_and_tracebacks_are_the_scripts_own(tmp_path):
    with pytest.raises(LaunchError) as info:
        run(STATE, ["--mode", "raise", "--rank", "1"], log_dir=tmp_path / "raise")
    text = str(info.value)
    assert info.value.ranks == [1] and "ValueError: rank 1 raises on purpose" in text
    assert f'File "{STATE}"' in text and "in fail_inside_a_function" in text
    assert "runpy" not in text and "warm_rank" not in text    # it starts in the script
    assert "[rank1]:" not in text                             # torch's own prefix taken off
    with pytest.raises(LaunchError) as info:
        run(STATE, ["--mode", "exit3", "--rank", "0"], log_dir=tmp_path / "exit")
    assert info.value.ranks == [0]
    assert "rank 0 exited with code 3" in (tmp_path / "exit" / "launcher.log").read_text()


def test_local_is_the_warm_start_unless_torchrun_is_asked_for(monkeypatch):
    monkeypatch.delenv(warm.LAUNCHER_ENV, raising=False)
    assert L.get_backend("local").name == "warm"
    monkeypatch.setenv(warm.LAUNCHER_ENV, "torchrun")
    assert L.get_backend("local").name == "torchrun"
    assert L.get_backend("warm").name == "warm"
    monkeypatch.setenv(warm.LAUNCHER_ENV, "mpirun")
    with pytest.raises(ValueError, match="DLTUTOR_LAUNCHER='mpirun': use 'warm'"):
        L.get_backend("local")


def test_a_preload_that_starts_a_thread_is_refused(tmp_path):
    (tmp_path / "threaded_mod.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(5,), daemon=True)"
        ".start()\n")
    code = ("from dltutor.launch import warm_server as w\ntry:\n    w.preload(['threaded_mod'])\n"
            "except RuntimeError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout
    assert "importing threaded_mod started a thread" in out and "backend='torchrun'" in out


def test_the_environment_block_keeps_the_first_keys_when_it_must_be_cut():
    env = {"A": "x" * 50, "RANK": "1", "DLTUTOR_LAUNCH_ID": "t1"}
    block = environ_block(env, 40, first=("DLTUTOR_LAUNCH_ID", "RANK"))
    assert len(block) == 40 and block.startswith(b"DLTUTOR_LAUNCH_ID=t1\0RANK=1\0\0")
    full = environ_block(env, 200)
    assert full.rstrip(b"\0").split(b"\0") == [b"A=" + b"x" * 50, b"RANK=1", b"DLTUTOR_LAUNCH_ID=t1"]


# Room on a shared node: the server goes after DLTUTOR_WARM_IDLE idle minutes, the next launch
# starts it again. 0.03 minutes (1.8 s) here; a sleeping launch is longer than that.
IDLE = "0.03"


def idle_exit_of(proc, within=60.0) -> int:
    """Wait for the warm server `proc` to end by itself; its exit code."""
    try:
        return proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the warm server was still running {within} s after its launches ended")


def slow_script(tmp_path, seconds: float) -> Path:
    script = tmp_path / "slow_rank.py"
    script.write_text(f"import time\ntime.sleep({seconds})\nprint('slept', flush=True)\n")
    return script


@pytest.mark.slow
def test_the_server_goes_when_idle_not_during_a_launch_and_comes_back(tmp_path, monkeypatch):
    warm.stop()
    monkeypatch.setenv(warm.IDLE_ENV, IDLE)
    long = run(slow_script(tmp_path, 6), log_dir=tmp_path / "long")   # 6 s > 1.8 s idle
    proc, folder = warm._server["proc"], Path(warm._server["folder"])
    note = (tmp_path / "long" / "launcher.log").read_text()
    assert long.returncode == 0 and proc.poll() is None        # it did not go mid-launch
    assert ("warm start: torch imported once in a server of this kernel; it stops after 0.03 "
            "idle minutes (DLTUTOR_WARM_IDLE)") in note
    again = run(LIGHT, log_dir=tmp_path / "again")
    assert warm._server["proc"] is proc                        # kept between launches...
    assert "warm start:" not in (tmp_path / "again" / "launcher.log").read_text()  # ...silently
    assert idle_exit_of(proc) == 0 and not folder.exists()     # gone when idle, folder and all
    assert not warm.running()
    back = run(LIGHT, log_dir=tmp_path / "back")
    assert back.returncode == 0 and warm._server["proc"] is not proc and warm.running()
    assert ("warm start: torch imported again (the server had stopped after 0.03 idle minutes)"
            in (tmp_path / "back" / "launcher.log").read_text())
    warm.stop()


@pytest.mark.slow
def test_a_launch_told_the_server_is_going_starts_a_new_one(tmp_path, monkeypatch):
    # the race: the kernel saw the server alive, and it went idle before the launch connected
    warm.stop()
    monkeypatch.setenv(warm.IDLE_ENV, IDLE)
    run(LIGHT, log_dir=tmp_path / "a")
    proc = warm._server["proc"]
    pidfd = os.pidfd_open(proc.pid)     # readable once it ended, without reaping it (poll()
    assert select.select([pidfd], [], [], 60)[0], "no idle exit"  # would: running() says False)
    os.close(pidfd)
    monkeypatch.setattr(warm, "running", lambda: True)
    path = warm.start()
    assert warm._server["proc"] is not proc and os.path.exists(path)
    assert "the server had stopped after 0.03 idle minutes" in warm._server["note"]
    warm.stop()


@pytest.mark.slow
def test_a_launch_resets_the_idle_clock_and_never_keeps_the_server(tmp_path, monkeypatch):
    warm.stop()
    monkeypatch.setenv(warm.IDLE_ENV, "never")
    run(LIGHT, log_dir=tmp_path / "a")
    proc = warm._server["proc"]
    assert "it stays until the kernel ends (DLTUTOR_WARM_IDLE=never)" in \
        (tmp_path / "a" / "launcher.log").read_text()
    time.sleep(4)
    assert proc.poll() is None                                  # 'never': it stays
    monkeypatch.setenv(warm.IDLE_ENV, IDLE)
    run(LIGHT, log_dir=tmp_path / "b")                          # the setting reaches it
    assert warm._server["proc"] is proc and idle_exit_of(proc) == 0
    warm.stop()


def test_the_idle_setting_reads_minutes_and_refuses_anything_else(monkeypatch):
    assert warm.idle_minutes({}) == warm.IDLE_DEFAULT == 10
    assert warm.idle_minutes({warm.IDLE_ENV: " 2.5 "}) == 2.5
    assert warm.idle_minutes({warm.IDLE_ENV: "never"}) is None
    assert warm.idle_minutes({warm.IDLE_ENV: "0"}) is None
    for bad in ("soon", "-1", "inf", "nan", "10m"):
        with pytest.raises(ValueError, match=f"DLTUTOR_WARM_IDLE='{bad}': give the minutes"):
            warm.idle_minutes({warm.IDLE_ENV: bad})
    monkeypatch.setenv(warm.IDLE_ENV, "soon")                   # said before anything starts
    with pytest.raises(ValueError, match="DLTUTOR_WARM_IDLE='soon'.*or 'never'"):
        L.launch(LIGHT, nproc=2, echo=False, timeout=60)
