"""Notebook 05's measurements and the model built on them (issue #42): warm-up cannot spoil the
first key of a pass, a fit that misses its own points says it is unusable and nothing is predicted
from it, and a tolerance as large as the value it checks decides nothing."""
from __future__ import annotations

import numpy as np

from dltutor.allreduce import cost, fitcheck
from dltutor.allreduce import findings as F
from dltutor.allreduce.sweep import over_passes, pass_order
from dltutor.core.findings import INCONCLUSIVE, against

SIZES = [2**k for k in range(10, 27, 2)]          # 1 KiB .. 64 MiB, as notebook 05's full sweep
ALPHA, BETA = 100e-6, 1 / 1.8e9


# ---------------------------------------------------------------- passes
def spoiling_measure(keys):
    """A fake timing: 10 for the first call of every sweep through the keys (a cold start, or
    the call right after the largest message), else 1."""
    calls = []

    def measure(k):
        calls.append(k)
        return 10.0 if (len(calls) - 1) % len(keys) == 0 else 1.0
    return measure, calls


def test_no_key_keeps_a_spoiled_first_measurement():
    keys = [(alg, d) for d in SIZES for alg in ("ring", "reduce_bcast", "recursive_doubling", "gloo")]
    measure, calls = spoiling_measure(keys)
    spans = over_passes(keys, measure, passes=3)
    assert all(fastest == 1.0 for fastest, _ in spans.values()), [k for k, v in spans.items() if v[0] > 1]
    assert len(calls) == 4 * len(keys)                       # one untimed warm-up sweep, then 3 passes
    firsts = {tuple(pass_order(keys, p, 3))[0] for p in range(3)}
    assert len(firsts) == 3 and sorted(pass_order(keys, 2, 3)) == sorted(keys)


def test_none_on_other_ranks_stays_none():
    spans = over_passes([1, 2], lambda k: None, passes=2)
    assert spans == {1: (None, None), 2: (None, None)}


# ---------------------------------------------------------------- is the fit usable?
def ring_summary(spoil_first: float = 0.0, sizes=SIZES) -> dict:
    """A lab summary whose ring (and others) follow the model, the ring's smallest size `spoil_first` s slower."""
    rows = []
    for alg in ("ring", "reduce_bcast", "recursive_doubling"):
        t = cost.model_time(alg, 2, np.array(sizes, float), ALPHA, BETA)
        if alg == "ring":
            t[0] += spoil_first
        rows += [{"algorithm": alg, "bytes": d, "time_s": float(x), "time_range_s": [float(x), float(x) * 1.05]}
                 for d, x in zip(sizes, t)]
    pp = [{"bytes": d, "time_s": float(cost.model_time("pingpong", 2, d, 40e-6, BETA))} for d in sizes]
    return {"world_size": 2, "results": rows, "pingpong": pp}


def test_a_fit_spread_over_a_spoiled_point_says_it_is_unusable_and_predicts_nothing():
    s = ring_summary(spoil_first=5016e-6)           # issue #42: 5,016 µs at 1 KiB against ~200 µs
    fits = cost.compare_fits(s)
    alpha, beta, _ = fits["ring, minimax"]
    chk = fitcheck.check(s, alpha, beta)
    assert not chk["usable"] and chk["worst"] > fitcheck.USABLE_ERROR
    lines = F.fit_findings(s, fits)
    assert "fit is UNUSABLE: it misses 7 of its own 9 points by more than 50% of the measured time (1 KiB by 93%" in lines[0] and "the largest busbw measured is" in lines[0]
    assert not any("ping-pong" in x or "model line" in x for x in lines)   # no α comparison, no model lines
    assert all("No model ratio" in x for x in F.pair_findings(s, "reduce_bcast", "ring", alpha, beta,
                                                              usable=chk["usable"]))
    table = fitcheck.model_lines(alpha, beta, chk)
    assert len(table) == 1 and table[0].startswith("no model table: ")
    fused = fitcheck.fusion_lines(s, alpha, beta, chk)
    assert not any(" model " in x for x in fused) and fused[-1].startswith("no modelled rows")
    t4k, t4m = (next(r["time_s"] for r in s["results"] if r["algorithm"] == "ring" and r["bytes"] == b)
                for b in (4096, 4 << 20))
    assert f"{1024 * t4k * 1e3:.1f} ms" in fused[1] and f"{t4m * 1e3:.2f} ms" in fused[1]   # measured
    from dltutor.allreduce.visualizer import fit_note
    assert "UNUSABLE" in fit_note(s, alpha, beta)


def test_a_fit_that_describes_its_points_is_used():
    s = ring_summary(sizes=[1 << 10, 1 << 14, 1 << 18, 1 << 22])   # the fast sizes: no 4 KiB point
    fits = cost.compare_fits(s)
    alpha, beta, _ = fits["ring, minimax"]
    chk = fitcheck.check(s, alpha, beta)
    assert chk["usable"] and "fit is usable" in F.fit_findings(s, fits)[0]
    assert len(fitcheck.model_lines(alpha, beta, chk)) == 2 + len(fitcheck.MODEL_NS) + 3
    fused = fitcheck.fusion_lines(s, alpha, beta, chk)
    assert "one 4 MiB ring all-reduce took" in fused[1] and "did not time 4 KiB" in fused[1]
    assert [x.split()[:2] for x in fused[2:]] == [["2", "model"], ["64", "model"]]
    assert "The model predicts" in F.pair_findings(s, "reduce_bcast", "ring", alpha, beta)[0]


# ---------------------------------------------------------------- a tolerance that decides nothing
def test_a_tolerance_as_large_as_the_value_is_inconclusive():
    line = against("reduce_bcast at 1 KiB", 149, 506, tolerance=1803, source="its model line", unit="µs")
    assert INCONCLUSIVE in line and "agree" not in line.replace("agreeing", "")
    assert "agree" in against("x", 149, 150, tolerance=5, source="its model line")
    assert "below it by" in against("x", 100, 150, tolerance=5, source="its model line")
    # a miss larger than even that tolerance is still a miss
    assert "above it by" in against("x", 5000, 100, tolerance=200, source="its model line")
