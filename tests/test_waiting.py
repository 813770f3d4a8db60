"""dltutor.launch.waiting: a cell whose ranks are silent says what it waits for (which rank, its
last line, when the wait gives up), at growing intervals; a quick launch says nothing of the kind.

The real cases launch 2 ranks with the warm start (backend 'local', what notebooks use) on gloo;
in one, rank 1 blocks in a `recv` whose `send` rank 0 never makes (06's pipeline check, issue 44).
"""
from __future__ import annotations

import re
import textwrap
import time
import uuid

import pytest

from dltutor.launch import run as L
from dltutor.launch import waiting as W
from dltutor.launch.results import LaunchTimeout

CLOCK = re.compile(r"gives up at (\d\d:\d\d:\d\d)")

BLOCKED_RECV = textwrap.dedent("""
    import torch
    import torch.distributed as tdist
    from dltutor.core import dist

    ctx = dist.init(use_cuda=False)
    if ctx.rank == 1:
        print("rank 1: step 3, recv from rank 0", flush=True)
        tdist.recv(torch.zeros(4), src=0)        # rank 0 never sends: blocked here
    else:
        print("rank 0: step 3, skipped the send; at the barrier", flush=True)
        tdist.barrier()
""")

QUICK = textwrap.dedent("""
    from dltutor.core import dist
    print(f"rank {dist.detect()['rank']}: done", flush=True)
""")


def clocks(start: float, end: float) -> set[str]:
    """Every HH:MM:SS clock time from `start` to `end` (epoch seconds), ends included."""
    return {time.strftime("%H:%M:%S", time.localtime(t)) for t in range(int(start), int(end) + 2)}


def test_the_notice_names_the_running_ranks_their_last_lines_and_the_deadline(monkeypatch):
    monkeypatch.setattr(W, "QUIET", 10.0)
    now = time.monotonic()
    wait = W.Waiting(deadline=now + 120, timeout=120, env={"DLTUTOR_DIST_TIMEOUT": "30"}, nproc=3)
    wait.heard(1, "step 3: recv from rank 0", now)
    wait.heard(0, 'DLTUTOR_METRICS {"rank": 0, "event": "step"}', now)
    wait.heard_launcher("job 12 pending (Resources)")
    assert not wait.due(now + 9.9)
    assert wait.due(now + 10.0)
    line = wait.notice(now + 10.0, running=[1, 2])
    assert line.startswith("[waiting] 10 s without a line from the ranks.")
    assert "rank 1 (last printed: 'step 3: recv from rank 0')" in line
    assert "rank 2 (printed nothing yet)" in line and "Ended: rank 0." in line
    assert "(timeout 120 s); a collective fails after 30 s (DLTUTOR_DIST_TIMEOUT)." in line
    shown = CLOCK.search(line).group(1)
    assert shown in clocks(time.time() + 110 - 1, time.time() + 110 + 1)
    # no rank process on this node (a Slurm job that has not started): the launcher's last line
    assert "the launcher still runs (its last line: 'job 12 pending (Resources)')" in \
        wait.notice(now + 30.0, running=[])


def test_notices_come_at_growing_intervals_and_a_rank_line_starts_over(monkeypatch):
    monkeypatch.setattr(W, "QUIET", 10.0)
    t0 = time.monotonic()
    wait = W.Waiting(deadline=t0 + 1000, timeout=1000, env={}, nproc=2)
    wait.start_over(t0)
    printed = []
    for s in range(0, 400):
        if wait.due(t0 + s):
            printed.append(s)
            wait.notice(t0 + s, running=[0, 1])
    assert printed == [10, 30, 70, 150, 310]           # gaps 10, 20, 40, 80, 160 s
    wait.heard(0, "step 4", t0 + 400)
    assert not wait.due(t0 + 409) and wait.due(t0 + 410)
    assert W.quoted("x" * 200).endswith("...") and len(W.quoted("x" * 200)) == W.WIDTH


@pytest.mark.slow
def test_a_rank_blocked_in_recv_is_named_with_the_deadline(tmp_path, monkeypatch, capsys):
    script = tmp_path / "blocked_recv.py"
    script.write_text(BLOCKED_RECV)
    monkeypatch.setattr(W, "QUIET", 3.0)
    timeout = 20
    before = time.time()
    with pytest.raises(LaunchTimeout) as info:
        L.launch(script, nproc=2, backend="local", timeout=timeout, echo=False,
                 log_dir=tmp_path / "run", env={"DLTUTOR_DIST_TIMEOUT": "120"})
    after = time.time()
    notices = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[waiting]")]
    assert notices, "the ranks were silent for 17 s and nothing said so"
    assert len(notices) <= 5, notices   # after 3, 9 s of silence (more if the ranks were slow
    first = notices[-1]                 # to start): not every second; the last one after both printed
    assert "rank 1 (last printed: 'rank 1: step 3, recv from rank 0')" in first, first
    assert "rank 0 (last printed: 'rank 0: step 3, skipped the send; at the barrier')" in first
    assert "(timeout 20 s); a collective fails after 120 s (DLTUTOR_DIST_TIMEOUT)" in first
    assert CLOCK.search(first).group(1) in clocks(before + timeout, after), (first, before, after)
    assert sorted(info.value.ranks) == [0, 1]


@pytest.mark.slow
def test_a_quick_launch_prints_no_notice(tmp_path, capsys):
    script = tmp_path / "quick.py"
    script.write_text(QUICK)
    for attempt in range(2):      # the first may start the warm server: only the second counts
        capsys.readouterr()
        result = L.launch(script, nproc=2, backend="local", timeout=120, echo=True,
                          log_dir=tmp_path / f"run{attempt}-{uuid.uuid4().hex[:4]}")
    out = capsys.readouterr().out
    assert "[rank 1] rank 1: done" in out and result.returncode == 0
    assert "[waiting]" not in out, out
