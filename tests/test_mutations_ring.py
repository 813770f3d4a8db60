"""Notebook 05's ring check, mutation-tested (tests/answers/05-reduce-scatter/).

Every answer goes through the real check: 3 ranks, then 4 (only if 3 was right), vector lengths
picked from a fresh seed (uneven chunks always among them), fresh random data on every rank. A
wrong answer must be judged wrong with a message naming its mistake, a right one solved. One check
per answer: ranks are forked from the warm start (about a second a launch), and an answer that
crashes or hangs would stall the others of a shared launch; the hanging ones end at HANG_TIMEOUT.
The judge's decoding is tested without ranks below.
"""
from __future__ import annotations

import contextlib
import io
import secrets

import numpy as np
import pytest

from dltutor.allreduce import exercise as ex
from dltutor.allreduce import ring
from dltutor.allreduce.exercise_judge import Case, explain, judge
from mutants import answers

pytestmark = pytest.mark.slow
EXERCISE = "05-reduce-scatter"
HANG_TIMEOUT = 6          # s a rank waits for a message in these checks (the notebook's: 10)


@pytest.mark.parametrize("answer", answers(EXERCISE), ids=str)
def test_answer_is_judged_as_expected(answer, tmp_path):
    seed = secrets.randbits(32)               # printed on failure: check(..., seed=) replays it
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        ok = ex.check(answer.write(tmp_path / "reduce_scatter_step.py"), echo=False, seed=seed,
                      dist_timeout=HANG_TIMEOUT)
    out = printed.getvalue()
    expected = answer.expect == "solved"
    assert ok is expected, f"{answer.path.name}, seed {seed}: {answer.why}\n{out}"
    if answer.expect == "wrong":
        assert out.startswith("wrong:"), out
        answer.assert_named(out)


# ------------------------------------------------------------------ the judge, without ranks
def simulate(n: int, lengths, whole: bool = False, rng=np.random.default_rng(0)) -> list[dict]:
    """What the ranks of the course's solution report (`whole`: it sends the whole vector)."""
    metrics = []
    for case, length in enumerate(lengths):
        bounds = ring.chunk_bounds(length, n)
        vecs = [rng.integers(-2 ** 20, 2 ** 20, length).astype(float) for _ in range(n)]
        total = sum(vecs)                             # what dist.all_reduce makes of them
        metrics += [dict(event="start", rank=r, case=case, values=list(v))
                    for r, v in enumerate(vecs)]
        for s in range(1, n):
            for r in range(n):
                a, b = (0, length) if whole else bounds[ring.sent_chunk(r, s, n)]
                metrics.append(dict(event="call", rank=r, case=case, step=s, name="isend",
                                    peer=(r + 1) % n, numel=b - a, nbytes=4 * (b - a),
                                    dtype="float32", sum=float(vecs[r][a:b].sum())))
                a, b = bounds[ring.sent_chunk((r - 1) % n, s, n)]     # what arrives
                metrics.append(dict(event="call", rank=r, case=case, step=s, name="irecv",
                                    peer=(r - 1) % n, numel=b - a, nbytes=4 * (b - a)))
            sent = {r: ring.sent_chunk(r, s, n) for r in range(n)}
            arrived = {(r + 1) % n: (c, vecs[r][slice(*bounds[c])].copy())
                       for r, c in sent.items()}
            for r, (c, data) in arrived.items():
                vecs[r][slice(*bounds[c])] += data
                metrics.append(dict(event="state", rank=r, case=case, step=s,
                                    values=list(vecs[r]), replaced=[]))
        metrics += [dict(event="reference", rank=r, case=case, values=list(total))
                    for r in range(n)]
    return metrics


def test_the_judge_passes_the_ring_and_names_the_whole_vector():
    assert judge(simulate(3, [7, 11, 9]), 3, [7, 11, 9]).problems == []
    assert judge(simulate(4, [5, 8]), 4, [5, 8]).problems == []
    whole = judge(simulate(3, [10], whole=True), 3, [10]).problems
    assert whole[0].startswith("with 10 elements on 3 ranks (chunks of [4, 3, 3] elements)")
    assert "P0 sent 10 elements (40 bytes) in step 1, its whole vector" in whole[1]
    assert "chunk 0 (4 elements, 16 bytes)" in whole[1]


def test_explain_names_what_a_chunk_holds():
    case = Case(7, 3, start={r: np.arange(7.0) * 1000 ** r + 1 for r in range(3)})
    a0, b0, c2 = (case.chunk(case.start[r], c) for r, c in ((0, 0), (1, 0), (2, 2)))
    assert explain(case, 1, 0, b0 + a0) == "B0+A0"            # the holder first
    assert explain(case, 1, 0, b0 + a0 + a0) == "B0+A0+A0"     # added twice
    assert explain(case, 0, 2, case.chunk(case.start[0], 1) + c2) == "A1+C2"   # wrong slot
    assert explain(case, 0, 0, np.zeros(3)) == "zeros"
    assert explain(case, 0, 0, a0 + 1) == "values that are no sum of the ranks' chunks"
