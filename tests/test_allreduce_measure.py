"""Notebook 05's measurements and the model built on them (issue #42): warm-up cannot spoil the
first key of a pass, a fit that misses its own points says it is unusable and nothing is predicted
from it, and a tolerance as large as the value it checks decides nothing."""
from __future__ import annotations

import numpy as np
import pytest

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
    assert not chk["usable"] and chk["worst"] > fitcheck.USABLE_FOLD
    lines = F.fit_findings(s, fits)
    assert "fit is UNUSABLE: it misses 8 of its own 9 points by more than 1.5x, too high or too low (1 KiB by 13x" in lines[0] and "the largest busbw measured is" in lines[0]
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
    lines = fitcheck.model_lines(alpha, beta, chk)
    assert len(lines) == 2 + len(fitcheck.MODEL_NS) + 3 + len(fitcheck.tie_lines(alpha, beta))
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


# ---------------------------------------------------------------- ties, labels (issue #42 05 read)
def test_a_model_margin_under_one_percent_is_printed_as_a_tie():
    """c16: at N = 2 and large D recursive doubling leads the ring by one α on a long time: a tie."""
    ties = fitcheck.tie_lines(ALPHA, BETA)
    two = next(x for x in ties if x.startswith("N = 2:"))
    assert "effectively a tie" in two and "64 MiB (recursive_doubling ahead of ring by 100 us" in two
    assert "1 KiB" not in two                                   # there α is most of the time: a real lead
    assert ties[-1] in fitcheck.model_lines(ALPHA, BETA, {"usable": True})


def test_the_measured_fusion_row_says_it_is_1024_times_one_call():
    s = ring_summary()
    alpha, beta, _ = cost.compare_fits(s)["ring, minimax"]
    fused = fitcheck.fusion_lines(s, alpha, beta, fitcheck.check(s, alpha, beta))
    assert "1024 x this run's median-pass 4 KiB ring time, not timed as 1024 calls" in fused[2]


def test_the_measured_fusion_row_uses_the_median_pass():
    # second read: 1024 x the fastest 4 KiB call (faster than the fastest 1 KiB one) gave 59x; medians ~430x
    s = {"world_size": 2, "results": [
        {"algorithm": "ring", "bytes": 4096, "time_s": 1e-4, "times_s": [1e-4, 1e-3, 2e-3]},
        {"algorithm": "ring", "bytes": 4 << 20, "time_s": 1e-2, "times_s": [1e-2, 2e-2, 3e-2]}]}
    row = fitcheck.fusion_lines(s, 1e-4, 1e-9, {"usable": False, "line": "x; y"})[1]
    assert row.split()[-1] == f"{1024 * 1e-3 / 2e-2:.0f}x"


def test_a_fit_reports_its_error_on_its_own_points():
    s = ring_summary()
    a, b, _ = cost.compare_fits(s)["ping-pong, minimax"]
    assert fitcheck.own_error(s, "ping-pong, minimax", a, b) < 1.001       # the ping-pong follows its model
    assert fitcheck.own_error(s, "ping-pong, minimax", a * 3, b) > 1.1      # a fold error: 1 is exact


def test_the_usable_rule_is_a_fold_error_the_same_both_ways():
    # second read, item 10: a model 8.1x too low read "88 %" (a relative error caps at 100 %)
    s = {"world_size": 2, "results": [{"algorithm": "ring", "bytes": b, "time_s": t} for b, t in
                                      ((1024, 8.1e-3), (2048, 1e-3))]}
    alpha, beta = 0.5e-3, 0.0          # ring on 2 ranks: 2 alpha = 1 ms at every size
    chk = fitcheck.check(s, alpha, beta)
    assert chk["worst"] == pytest.approx(8.1) and not chk["usable"] and "1 KiB by 8.1x" in chk["line"]
    assert fitcheck.check(s | {"results": s["results"][1:]}, alpha, beta)["usable"]
    too_high = {"world_size": 2, "results": [{"algorithm": "ring", "bytes": 1024, "time_s": 1e-3 / 1.6}]}
    assert not fitcheck.check(too_high, alpha, beta)["usable"]     # 1.6x too high: out, as 1.6x too low


def test_a_model_miss_names_each_side_with_its_own_size():
    # second read, item 2: "4.2x (at 16 KiB; 278 %)" took the fold and the percent from two sizes
    rows = [{"algorithm": "reduce_bcast", "bytes": b, "time_s": t} for b, t in
            ((1024, 1e-3 / 3.8), (16384, 4.2e-3))]
    s = {"world_size": 2, "results": rows}
    miss = F.model_miss(s, "reduce_bcast", 0.5e-3, 0.0)     # model: 2 alpha = 1 ms everywhere
    assert miss["low"] == (pytest.approx(4.2), 16384) and miss["high"] == (pytest.approx(3.8), 1024)
    assert F.miss_text(miss) == "up to 4.2x too low (at 16 KiB) and 3.8x too high (at 1 KiB)"
