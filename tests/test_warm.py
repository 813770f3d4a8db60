"""The warm start (dltutor.launch.warm): what it promises beyond the launcher's own guarantees.

Those guarantees (the failing rank named, timeout, stop button, killed kernel, busy port, logs,
labelled output) are tested under the warm start and under torchrun in test_launch.py. Here: the
same losses as torchrun bit for bit, a rank that looks like a torchrun rank from inside, state
that does not leak from one launch into the next, the server's life, exit codes and tracebacks.
"""
from __future__ import annotations

import os
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
