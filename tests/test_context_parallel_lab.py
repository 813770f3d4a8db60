"""Lab 09's ring_attention.py and dltutor.context_parallel's memory / torch_cp / runs / findings.

The lab runs --tiny on 2 and 4 ranks in one module-scoped fixture (runs.run_all: torch's
context_parallel in the 2-rank launch only); the findings are checked on synthetic rows.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from dltutor.context_parallel import attention as A
from dltutor.context_parallel import findings as F
from dltutor.context_parallel import memory as M
from dltutor.context_parallel import runs
from dltutor.core.course import lab


@pytest.fixture(scope="module")
def results():
    return runs.run_all(ranks=(2, 4), tiny=True)


# ---------------------------------------------------------------- the lab on real ranks
def test_one_report_per_rank(results):
    for n, reps in results.items():
        assert [r["rank"] for r in reps] == list(range(n))
        assert all(r["world_size"] == n for r in reps)


def test_ring_and_ulysses_exact_both_masks_layouts_dtypes(results):
    rows = runs.check_rows(results)
    seen = {(r["ranks"], r["impl"], r["dtype"], r["mask"], r["layout"]) for r in rows}
    for n in (2, 4):
        for dtype in ("float64", "float32"):
            for mask in ("none", "causal"):
                assert (n, "ulysses", dtype, mask, "contiguous") in seen
                for layout in ("contiguous", "zigzag"):
                    assert (n, "ring (course)", dtype, mask, layout) in seen
    for r in rows:
        assert r["out err"] <= r["tolerance"] and r["grad err"] <= r["tolerance"], r


def test_blocks_and_bytes_counted_equal_the_formulas(results):
    blocks = runs.block_rows(results)
    assert {(r["ranks"], r["layout"]) for r in blocks} == {(n, l) for n in (2, 4)
                                                            for l in ("contiguous", "zigzag")}
    for r in blocks:
        assert r["blocks"] == pytest.approx(r["formula"]), r
    four = sorted((r for r in blocks if r["ranks"] == 4 and r["layout"] == "contiguous"),
                  key=lambda r: r["rank"])
    assert [r["blocks"] for r in four] == sorted(r["blocks"] for r in four)  # later ranks work more
    rows = runs.bytes_rows(results)
    assert {(r["ranks"], r["impl"]) for r in rows} == {(n, i) for n in (2, 4) for i in ("ring", "ulysses")}
    for r in rows:
        assert r["forward"] == r["formula forward"] > 0 and r["backward"] == r["formula backward"] > 0


def test_torch_context_parallel_measured_not_assumed(results):
    rows = runs.torch_rows(results)
    assert {r["ranks"] for r in rows} == {2}, "torch's CP runs in the first launch only"
    by = {r["causal"]: r for r in rows}
    if results[2][0]["hardware"] == "CPU/gloo":
        free = by[False]
        assert free["status"] == "ran" and free["out_err"] < 1e-5
        assert free["collectives"].get("all_gather_into_tensor", 0) >= 1 and not free["ring"]
        assert by[True]["status"] == "failed"
        assert by[True]["error"].startswith("NotImplementedError: ")
        assert "147793" in by[True]["upstream"]
    else:
        assert all(r["status"] == "ran" and r["out_err"] < 1e-2 for r in rows)


def test_memory_grows_with_seq_and_shrinks_with_ranks_as_the_formula_says(results):
    rows = runs.memory_rows(results)
    by = {}
    for r in rows:
        by.setdefault(r["ranks"], []).append(r)
    assert sorted(by) == [1, 2, 4]
    for n, pts in by.items():
        pts.sort(key=lambda r: r["seq"])
        peaks = [r["peak_bytes"] for r in pts]
        assert peaks == sorted(peaks) and peaks[0] < peaks[-1], (n, peaks)
        grow = peaks[-1] / peaks[0]
        want = pts[-1]["formula_bytes"] / pts[0]["formula_bytes"]
        assert want / 1.6 < grow < want * 1.6, (n, grow, want)
        for r in pts:
            assert 0.7 < r["ratio"] < 2.0, r   # measured within a factor of the formula
            assert r["peak_bytes"] != r["formula_bytes"] and r["saved_bytes"] > 0, r  # measured, not copied
    seq = max(r["seq"] for r in by[1])
    at = {n: next(r["peak_bytes"] for r in pts if r["seq"] == seq) for n, pts in by.items()}
    assert at[1] > at[2] > at[4]


def test_times_alternated_with_intervals(results):
    rows = runs.time_rows(results)
    for n in (2, 4):
        impls = {r["impl"] for r in rows if r["ranks"] == n}
        assert {"one process", "ulysses"} <= impls and any(i.startswith("course ring") for i in impls)
    for r in rows:
        assert r["runs"] == 3 and r["ms"] > 0 and r["±"] == r["±"]  # 3 runs: an interval, not nan
        assert r["hardware"] in ("CPU/gloo", "GPU/nccl")


# ---------------------------------------------------------------- memory, in this process
def test_memory_measure_sees_the_score_matrix():
    got = []
    for seq in (64, 128):
        q, k, v, w = (torch.randn(1, 2, seq, 8) for _ in range(4))
        m = M.measure(M.pass_of(lambda *t: A.reference(*t, causal=False), q, k, v, w), "cpu")
        f = M.formula(1, 2, seq, 8, 1, 4)
        assert m["peak_bytes"] >= 3 * f["score"], (m, f)      # P, dP, dS live at once
        assert m["saved_bytes"] >= f["score"]                 # backward keeps P
        got.append(m["peak_bytes"])
    assert 3.0 < got[1] / got[0] < 4.5                        # S² dominates: ~4x per doubling


def test_memory_formula():
    one, ring = M.formula(1, 8, 1024, 64, 1, 4), M.formula(1, 8, 1024, 64, 4, 4)
    assert one["score"] == 8 * 1024 * 1024 * 4 and ring["score"] == 8 * 256 * 256 * 4
    assert one["dominant"] == ring["dominant"] == "score"
    assert M.formula(1, 8, 64, 64, 4, 4)["dominant"] == "linear"
    with pytest.raises(ValueError):
        M.formula(1, 8, 10, 64, 4, 4)


# ---------------------------------------------------------------- bad input: one line, exit 2
def _lab(*args, world=2):
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    return subprocess.run([sys.executable, str(lab(runs.LAB)), *args], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args, words", [
    (["--tiny", "--heads", "3"], "not divisible by 2 ranks"),
    (["--tiny", "--seq", "6"], "zigzag"),
    (["--tiny", "--mem-seqs", "32,34"], "zigzag"),
    (["--tiny", "--impl", "flash"], "choose from"),
])
def test_bad_input_one_error_exit_2(args, words):
    res = _lab(*args)
    assert res.returncode == 2, res.stderr
    assert words in res.stderr and "Traceback" not in res.stderr


def test_help_shows_launch_forms_and_defaults():
    res = subprocess.run([sys.executable, str(lab(runs.LAB)), "--help"], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "torchrun --nproc-per-node 2" in res.stdout
    assert "srun" in res.stdout and "(default: 1024)" in res.stdout


# ---------------------------------------------------------------- findings on synthetic rows
def _check(err, dtype="float32"):
    return {"ranks": 2, "impl": "ring (course)", "dtype": dtype, "mask": "causal", "layout": "zigzag",
            "out err": err, "grad err": err, "tolerance": runs.TOLERANCE[dtype]}


def test_findings_exactness():
    assert "every check within" in F.exactness([_check(1e-7)])[0]
    assert "ABOVE the tolerance" in F.exactness([_check(1e-7), _check(2e-3)])[0]


def _blocks(layout, values, formula=None):
    n = len(values)
    return [{"ranks": n, "layout": layout, "rank": r, "blocks": b,
             "formula": b if formula is None else formula[r]} for r, b in enumerate(values)]


def test_findings_blocks():
    rows = _blocks("contiguous", [0.5, 1.5]) + _blocks("contiguous", [0.5, 1.5, 2.5, 3.5]) \
        + _blocks("zigzag", [1, 1]) + _blocks("zigzag", [2, 2, 2, 2])
    text = " ".join(F.blocks(rows))
    assert "1.50x the mean at 2 ranks, 1.75x the mean at 4 ranks" in text
    assert "imbalance grows with the ranks" in text and "stays at 1.00: balanced" in text
    assert "NOT equal" not in text
    assert "NOT equal" in " ".join(F.blocks(_blocks("zigzag", [1, 1], formula=[1, 2])))


def _bytes(n, impl, fwd, bwd, heads=4):
    return {"ranks": n, "impl": impl, "heads": heads, "seq": 64, "forward": fwd, "backward": bwd,
            "formula forward": fwd, "formula backward": bwd}


def test_findings_bytes():
    text = F.bytes_sent([_bytes(4, "ring", 300, 700, heads=8), _bytes(4, "ulysses", 100, 100, heads=8)])
    assert any("ring sent 5x what Ulysses sent" in s and "Ulysses sends less" in s for s in text)
    assert any("at most 8 ranks" in s for s in text)
    text = F.bytes_sent([_bytes(2, "ring", 100, 100), _bytes(2, "ulysses", 100, 100)])
    assert any("the ring sends no more here" in s for s in text)


def _mem(n, seq, peak, formula):
    return {"impl": "one process" if n == 1 else "course ring", "ranks": n, "seq": seq,
            "peak_bytes": peak, "formula_bytes": formula, "ratio": peak / formula, "dominant": "score",
            "score_bytes": formula // 2, "saved_bytes": peak // 2, "how": "peak bytes (test)"}


def test_findings_memory():
    rows = [_mem(1, 64, 100, 100), _mem(1, 128, 400, 380), _mem(2, 64, 40, 40), _mem(2, 128, 100, 95)]
    text = " ".join(F.memory(rows))
    assert "rises as seq grows" in text and "measured peak grew 4.00x, the formula 3.80x" in text
    assert "4.00x less per rank (formula 4.00x" in text and "What is measured: peak bytes (test)" in text
    assert "Some of that is recomputation" in text and "does not separate the two" in text


def _time(n, impl, ms, ci, mask="causal"):
    return {"ranks": n, "mask": mask, "impl": impl, "ms": ms, "±": ci, "fastest": ms, "runs": 3,
            "hardware": "CPU/gloo"}


def test_findings_speed():
    slow = F.speed([_time(2, "one process", 1.0, 0.1), _time(2, "ulysses", 5.0, 0.5)])
    assert "5.00x one process" in slow[0] and "slower in 1" in slow[-1] and "faster in 0" in slow[-1]
    assert "plain parallelism" in slow[-1] and "2 ranks: " in slow[-1] and "cores against the baseline" in slow[-1]
    fast = F.speed([_time(2, "one process", 5.0, 0.1), _time(2, "ulysses", 1.0, 0.1),
                    _time(2, "one process (fused SDPA)", 0.5, 0.1)])
    assert "written-out one-process attention: faster in 1" in fast[-1]
    assert "fused SDPA on one process: faster in 0, slower in 1" in fast[-1]
    unsure = F.speed([_time(2, "one process", 1.0, 3.0), _time(2, "ulysses", 2.0, 3.0)])
    assert "No comparison decided" in unsure[-1]


def test_plots_labelled_with_formula_marks():
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.context_parallel import plots as P
    blocks = _blocks("contiguous", [0.5, 1.5]) + _blocks("zigzag", [1, 1])
    fig = P.plot_blocks(blocks)
    from dltutor.core.device import hardware_label
    assert all(hardware_label() in ax.get_title() for ax in fig.axes)
    assert any("blocks_formula" in t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts())
    fig = P.plot_bytes([_bytes(2, "ring", 100, 300), _bytes(2, "ulysses", 50, 50)])
    assert hardware_label() in fig.axes[0].get_title()
    mem = [_mem(1, 64, 100, 100), _mem(1, 128, 400, 380), _mem(2, 64, 40, 40), _mem(2, 128, 100, 95)]
    ax = P.plot_memory(mem).axes[0]
    assert ax.get_yscale() == "log" and hardware_label() in ax.get_title()
    assert sum("formula" in t.get_text() for t in ax.get_legend().get_texts()) == 2
