"""When ranks fail, the cause leads: the first error in time that is not a rank losing its peer.

The unit tests feed the rules made-up tracebacks and reports; the launch tests make a real
2-rank failure (rank 1's matrix shapes do not fit, a moment after rank 0 entered an all-reduce
that then loses its peer) and read what the launcher and the ranks' reports say.
"""
from __future__ import annotations

import textwrap

import pytest

from dltutor.grading import ranks
from dltutor.launch.results import blame_ranks, error_lines, lost_peer

PEER = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"
SHAPES = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x8 and 6x8)"


def trace(*frames: str, last: str) -> str:
    body = "".join(f'  File "x.py", line {i}, in f\n    {src}\n' for i, src in enumerate(frames))
    return f"Traceback (most recent call last):\n{body}{last}"


def test_a_frame_that_quotes_a_timeout_is_not_a_lost_peer():
    tail = trace("dist.init_process_group('gloo', timeout=timedelta(seconds=30))",
                 "y = x @ w", last=SHAPES)
    assert error_lines(tail) == SHAPES and not lost_peer(tail)
    assert lost_peer(trace("dist.all_reduce(t)", last=PEER))
    assert lost_peer("no traceback, but: Connection reset by peer")


def test_the_first_error_in_time_is_blamed_first():
    codes, tails = {0: 1, 1: 1, 2: 1}, {0: SHAPES, 1: trace(last="ValueError: x"), 2: PEER}
    assert blame_ranks(codes, tails.get) == [0, 1]
    assert blame_ranks(codes, tails.get, first_error={0: 5.0, 1: 2.0, 2: 1.0}) == [1, 0]


def test_failure_lines_lead_with_the_cause_then_name_the_consequences():
    metrics = [{"event": "error", "rank": 0, "t": 10.0, "error": PEER, "step": 2},
               {"event": "error", "rank": 1, "t": 10.4, "error": SHAPES, "step": 2},
               {"event": "steps", "rank": 0}]
    lines = ranks.failure_lines(metrics)
    assert lines[0] == f"rank 1 raised first at step 2: {SHAPES}"
    assert lines[1].startswith("then rank 0 raised at step 2 (a consequence: it lost its peer")
    assert [e["rank"] for e in ranks.in_time_order(metrics)] == [1, 0]
    both = [{**m, "error": SHAPES} for m in metrics[:2]]
    assert ranks.failure_lines(both)[0].startswith("rank 0 raised first")   # earlier in time


SCRIPT = textwrap.dedent("""
    import time
    import torch
    import torch.distributed as dist
    from dltutor.core import dist as ddist
    from dltutor.grading import ranks

    with ddist.session() as ctx:
        try:
            if ctx.rank == 1:
                time.sleep(1.0)                       # rank 0 is inside the all-reduce by now
                torch.ones(4, 8) @ torch.ones(6, 8)   # the student's shape mistake
            dist.all_reduce(torch.ones(3))
        except Exception as exc:
            if REPORT:
                ranks.report_error(exc, step=1)
            raise
""")


@pytest.mark.parametrize("report", [False, True], ids=["launcher", "reports"])
def test_a_shape_mismatch_on_one_rank_leads_the_message(tmp_path, report):
    script = tmp_path / "shapes.py"
    script.write_text(SCRIPT.replace("REPORT", str(report)))
    ran = ranks.run_on_ranks(script, nproc=2, timeout=90, dist_timeout=20)
    assert ran.failure, "the launch should have failed"
    head = ran.failure.splitlines()
    assert head[0].startswith("rank 1 failed"), ran.failure
    assert next(ln for ln in head if ln.startswith("rank 1: ")) == f"rank 1: {SHAPES}", ran.failure
    if report:
        lines = ranks.failure_lines(ran.metrics)
        assert lines[0] == f"rank 1 raised first at step 1: {SHAPES}", lines
        assert all(ln.startswith("then rank 0") for ln in lines[1:]), lines


def test_the_cause_line_is_the_exception_not_what_follows_it():
    from dltutor.launch.results import cause_lines
    tails = {1: trace("y = x @ w", last=SHAPES) + "\nTerminated", 0: "starting\nKilled by signal 9"}
    assert cause_lines([1, 0], tails.get) == [f"rank 1 (first): {SHAPES}", "rank 0: Killed by signal 9"]
