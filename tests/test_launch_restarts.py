"""launch(..., max_restarts=N) (dltutor.launch.restart): a rank dies, every rank is stopped and
the whole launch starts again, N times at most.

Real 2-rank gloo launches of tests/scripts/restart_rank.py (rank 1 SIGKILLs itself on its first
attempts, as seen by dltutor.checkpoint.restarts.restart_count) with the warm start ('local') and
torchrun; every launch carries a TEST_TAG and no process with it may be left afterwards. The loop's
own rules (the attempt variable, a log folder per attempt, one shared timeout, a timeout or an
interrupt ends it) are checked with a stand-in for one launch.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from dltutor.checkpoint import restarts
from dltutor.launch import restart
from dltutor.launch.results import LaunchError, LaunchResult, LaunchTimeout
from dltutor.launch.run import launch

from test_launch import tag, tagged  # noqa: F401  (the fixture: no process outlives a launch)

RANK = Path(__file__).parent / "scripts" / "restart_rank.py"


def go(tmp_path, tag, fail_attempts, max_restarts, backend="local"):
    return launch(RANK, nproc=2, args=["--fail-attempts", str(fail_attempts)], backend=backend,
                  env={"TEST_TAG": tag}, log_dir=tmp_path / "logs", echo=False, timeout=180,
                  max_restarts=max_restarts)


@pytest.mark.parametrize("backend", ["local", "torchrun"])
def test_a_killed_rank_is_restarted_and_every_log_kept(tmp_path, tag, backend):
    res = go(tmp_path, tag, fail_attempts=1, max_restarts=2, backend=backend)
    assert isinstance(res, restart.RestartedResult) and res.returncode == 0
    assert res.restart_count == 1
    (r,) = res.restarts
    assert r.attempt == 0 and r.ranks == [1], r
    assert r.exit_codes.get(1) == -9, r               # SIGKILL, as the launcher saw it
    assert "rank 1" in r.cause
    assert [m["attempt"] for m in res.metrics] == [1, 1]   # the last attempt's metrics
    assert sorted(res.attempt_logs) == [0, 1]
    first, last = res.attempt_logs[0], res.attempt_logs[1]
    assert "rank 1 dies on attempt 0" in first[1].read_text()    # attempt 0's logs kept
    assert "attempt 1 rank 1" in last[1].read_text() and "attempt 0" not in last[1].read_text()
    assert res.logs == last and first[0].parent == tmp_path / "logs" / "attempt-0"


def test_no_restarts_behaves_as_before(tmp_path, tag):
    with pytest.raises(LaunchError) as err:
        go(tmp_path, tag, fail_attempts=1, max_restarts=0)
    assert err.value.ranks == [1]
    assert type(err.value.result) is LaunchResult
    assert (tmp_path / "logs" / "rank1.log").is_file()            # no attempt-N folders
    assert not list((tmp_path / "logs").glob("attempt-*"))


def test_a_rank_that_always_fails_exhausts_the_restarts(tmp_path, tag):
    with pytest.raises(LaunchError) as err:
        go(tmp_path, tag, fail_attempts=99, max_restarts=2)
    text = str(err.value)
    assert "failed on all 3 attempts (max_restarts=2)" in text, text
    assert text.count("rank 1 (SIGKILL) blamed") == 3, text
    assert err.value.ranks == [1] and len(err.value.restarts) == 3
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [f"attempt-{k}" for k in range(3)]


def test_restart_count_reads_the_course_launchers_variable():
    assert restarts.restart_count({}) == 0
    assert restarts.restart_count({restart.RESTART_COUNT_ENV: "2"}) == 2
    assert restarts.restart_count({"TORCHELASTIC_RESTART_COUNT": "1"}) == 1


class Stand:
    """A stand-in for one launch: attempt k fails with `errors[k]` (None: succeeds)."""

    def __init__(self, errors):
        self.errors, self.calls = errors, []

    def __call__(self, **kw):
        self.calls.append(kw)
        err = self.errors[len(self.calls) - 1]
        if err is None:
            return LaunchResult(0, 0.0, [{"rank": 0}], {0: kw["log_dir"] / "rank0.log"}, ["x"],
                                kw["log_dir"], "warm")
        raise err


def kwargs(tmp_path, most):
    return {"script": "lab.py", "timeout": 100.0, "log_dir": tmp_path, "env": {"A": "1"},
            "echo": False, "max_restarts": most}


def test_each_attempt_gets_its_count_its_folder_and_what_is_left_of_the_timeout(tmp_path):
    stand = Stand([LaunchError("rank 1 failed", ranks=[1]), None])
    res = restart.restarting(stand, kwargs(tmp_path, 3))
    envs = [c["env"] for c in stand.calls]
    assert [e.pop(restart.RESTART_COUNT_ENV) for e in envs] == ["0", "1"]
    t0 = [float(e.pop(restart.ATTEMPT_T0_ENV)) for e in envs]    # when each attempt was started
    assert t0[0] <= t0[1] and envs == [{"A": "1"}, {"A": "1"}]
    assert restarts.startup_s({restart.ATTEMPT_T0_ENV: repr(t0[0])}) >= 0
    assert restarts.startup_s({}) is None
    assert [c["log_dir"].name for c in stand.calls] == ["attempt-0", "attempt-1"]
    assert all(c["max_restarts"] == 0 for c in stand.calls)
    assert 0 < stand.calls[1]["timeout"] <= stand.calls[0]["timeout"] <= 100.0
    assert res.restart_count == 1 and res.restarts[0].ranks == [1]


@pytest.mark.parametrize("stop", [LaunchTimeout("timed out", ranks=[0]), KeyboardInterrupt()])
def test_a_timeout_or_an_interrupt_is_never_restarted(tmp_path, stop):
    stand = Stand([LaunchError("rank 1 failed", ranks=[1]), stop, None])
    with pytest.raises(type(stop)):
        restart.restarting(stand, kwargs(tmp_path, 5))
    assert len(stand.calls) == 2


def test_slurm_jobs_are_requeued_not_restarted_here(tmp_path):
    with pytest.raises(ValueError, match="--requeue"):
        restart.restarting(Stand([None]), {**kwargs(tmp_path, 1), "backend": "slurm"})
