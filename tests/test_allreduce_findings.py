"""Notebook 05's sentences come from the run's numbers: each findings function is fed rows that go
one way, the other way, and inside the spread, and must say so. Also the 2-D cost model and the
library table (its seed-000 column verbatim in the seed)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from dltutor.allreduce import cost as cm
from dltutor.allreduce import findings as F
from dltutor.allreduce import landscape
from dltutor.allreduce.hierarchical import node_groups
from dltutor.core.findings import INCONCLUSIVE

ROOT = Path(__file__).resolve().parent.parent
SIZES = [1 << 10, 1 << 16, 1 << 20]


def _passes(t: float, spread: float, passes: int) -> list[float]:
    """`passes` pass times spread evenly from t to t*(1+spread)."""
    return [t * (1 + spread * k / max(1, passes - 1)) for k in range(passes)]


def summary(times: dict, n: int = 2, pingpong=None, spread: float = 0.0, passes: int = 3, **extra) -> dict:
    """A lab summary: times[alg] = [seconds per size]; `passes` passes from time to time*(1+spread)."""
    rows = [{"algorithm": a, "bytes": d, "time_s": t, "time_range_s": [t, t * (1 + spread)],
             "times_s": _passes(t, spread, passes)}
            for a, ts in times.items() for d, t in zip(SIZES, ts)]
    pp = [{"bytes": d, "time_s": t, "times_s": _passes(t, spread, passes)} for d, t in zip(SIZES, pingpong or [])]
    return {"world_size": n, "results": rows, "pingpong": pp, **extra}


def modelled(alg, n=2, alpha=50e-6, beta=1e-9, scale=1.0):
    return list(cm.model_time(alg, n, np.array(SIZES, float), alpha, beta) * scale)


# ---------------------------------------------------------------- winners per size
def test_winner_is_whichever_is_faster_and_inconclusive_inside_the_spread():
    a_wins = summary({"ring": [1e-3, 2e-3, 3e-3], "gloo": [2e-3, 4e-3, 6e-3]})
    lines = F.winner_findings(a_wins)
    assert all("fastest ring" in s and "ring is 0.50x gloo" in s for s in lines), lines
    b_wins = summary({"ring": [2e-3, 4e-3, 6e-3], "gloo": [1e-3, 2e-3, 3e-3]})
    assert all("fastest gloo" in s for s in F.winner_findings(b_wins))
    close = summary({"ring": [1.00e-3] * 3, "gloo": [1.05e-3] * 3}, spread=0.2)
    lines = F.winner_findings(close)
    assert all(INCONCLUSIVE in s and "fastest" not in s for s in lines), lines
    assert lines[0].startswith("N = 2, D = 1 KiB")


# ---------------------------------------------------------------- α of the ring vs the ping-pong
def test_fit_findings_report_the_alpha_ratio_each_way():
    pp = modelled("pingpong", alpha=20e-6)
    big = summary({"ring": modelled("ring", alpha=60e-6), "reduce_bcast": modelled("reduce_bcast", scale=0.5),
                   "recursive_doubling": modelled("recursive_doubling", scale=2.0)}, pingpong=pp)
    lines = F.fit_findings(big, cm.compare_fits(big))
    assert lines[0].startswith("the ring's minimax α-β fit is usable: within 0%")
    lines = lines[1:]
    assert "the ring's α 60 µs vs the ping-pong's α 20 µs: the ring's α is 3.00x" in lines[0]
    # model lines drawn with the ring's alpha: above reduce_bcast's points, below recursive doubling's
    assert lines[1].startswith("reduce_bcast at 1 KiB") and "below it by" in lines[1]
    assert lines[2].startswith("recursive_doubling at 1 KiB") and "above it by" in lines[2]
    assert "ring: the model with the ring's minimax α, β is within 0% of the measured time" in lines[3]
    small = summary({"ring": modelled("ring", alpha=10e-6)}, pingpong=pp)
    assert "the ring's α is 0.50x the ping-pong's α" in F.fit_findings(small, cm.compare_fits(small))[1]
    # ping-pong too fast to resolve alpha: say so rather than divide by zero
    flat = summary({"ring": modelled("ring")}, pingpong=[d * 1e-9 for d in SIZES])
    assert "not resolved" in F.fit_findings(flat, cm.compare_fits(flat))[1]


def test_pair_findings_put_the_measurement_beside_the_model():
    s = summary({"reduce_bcast": [1e-3, 2e-3, 4e-3], "ring": [1e-3, 2e-3, 2e-3]}, spread=0.01)
    lines = F.pair_findings(s, "reduce_bcast", "ring", 50e-6, 1e-9)
    assert len(lines) == 2 and INCONCLUSIVE in lines[0] and "D = 1 KiB" in lines[0]
    assert "reduce_bcast is 2.00x ring" in lines[1] and "D = 1 MiB" in lines[1]
    ratio = cm.model_time("reduce_bcast", 2, SIZES[-1], 50e-6, 1e-9) / cm.model_time("ring", 2, SIZES[-1], 50e-6, 1e-9)
    assert f"The model predicts reduce_bcast = {ratio:.2f}x ring here." in lines[1]
    faster = summary({"reduce_bcast": [1e-3, 1e-3, 1e-3], "ring": [3e-3, 3e-3, 3e-3]})
    assert "reduce_bcast is 0.33x ring" in F.pair_findings(faster, "reduce_bcast", "ring", 50e-6, 1e-9)[1]


# ---------------------------------------------------------------- hierarchical: findings and model
def hier_summary(h, spread=0.0):
    ring = modelled("ring", n=4)
    return summary({"hierarchical": h, "ring": ring, "gloo": ring}, n=4, spread=spread, per_node=2,
                   nodes=2, checks={"int64": True}, groups={0: {"intra": [0, 1], "inter": [0, 2]}})


def test_hierarchical_findings_each_way():
    ring = modelled("ring", n=4)
    faster = F.hierarchical_findings(hier_summary([t / 2 for t in ring]))
    assert "rank 0: intra [0, 1], inter [0, 2]" in faster[0] and faster[1].endswith("True")
    assert faster[2].startswith("this launch's flat ring's minimax α-β fit is usable")
    assert "hierarchical is 0.50x ring" in faster[3] and "hierarchical is 0.50x gloo" in faster[3]
    slower = F.hierarchical_findings(hier_summary([t * 2 for t in ring]))
    assert "hierarchical is 2.00x ring" in slower[-1]
    same = F.hierarchical_findings(hier_summary([t * 1.01 for t in ring], spread=0.1))
    assert all(INCONCLUSIVE in s for s in same[3:])
    model = cm.hierarchical_time(2, 2, SIZES[0], (50e-6, 1e-9), (50e-6, 1e-9)) / cm.flat_ring_time(
        2, 2, SIZES[0], (50e-6, 1e-9), (50e-6, 1e-9))
    assert f"predicts hierarchical = {model:.2f}x ring" in faster[3]


def test_node_groups_split_ranks_into_intra_and_inter_node_groups():
    assert node_groups(4, 2) == ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
    assert node_groups(8, 4) == ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 4], [1, 5], [2, 6], [3, 7]])
    assert node_groups(3, 1) == ([[0], [1], [2]], [[0, 1, 2]])
    with pytest.raises(ValueError, match="multiple of ranks per node"):
        node_groups(6, 4)


def test_hierarchical_cost_model():
    intra, inter = (2e-6, 1 / 100e9), (10e-6, 1 / 12.5e9)
    m, l, d = 2, 2, 64 << 20
    assert cm.hierarchical_time(m, l, d, intra, inter) == pytest.approx(
        2 * (l - 1) * (intra[0] + d / l * intra[1]) + 2 * (m - 1) * inter[0]
        + 2 * (m - 1) / m * d / l * inter[1])
    assert cm.flat_ring_time(m, l, d, intra, inter) == pytest.approx(2 * 3 * (inter[0] + d / 4 * inter[1]))
    assert cm.flat_ring_time(1, 4, d, intra, inter) == pytest.approx(cm.ring_time(4, d, *intra))
    assert cm.hierarchical_time(1, 4, d, intra, inter) == pytest.approx(cm.ring_time(4, d, *intra))
    for nodes, per_node in ((2, 2), (16, 8)):   # the closed form of the saving
        for size in (1 << 10, 1 << 28):
            closed = (2 * (per_node - 1) * (nodes * inter[0] - intra[0])
                      + 2 * (per_node - 1) / per_node * size * (inter[1] - intra[1]))
            assert cm.hierarchical_saving(nodes, per_node, size, intra, inter) == pytest.approx(closed)
    # fast links inside the node: 2-D wins at every size; slower ones inside: the flat ring wins big D
    assert np.all(cm.hierarchical_saving(16, 8, np.array([1e3, 1e9]), intra, inter) > 0)
    assert cm.hierarchical_saving(16, 8, 1e9, inter, (10e-6, 1 / 100e9)) < 0
    # alike links: only the latency steps differ, 2(L-1)(M-1)·α
    alike = (5e-6, 1e-10)
    assert cm.hierarchical_saving(2, 2, 1e9, alike, alike) == pytest.approx(2 * 1 * 1 * 5e-6)


# ---------------------------------------------------------------- the library table
def test_library_table_quotes_seed_000_verbatim():
    folder = Path(os.environ.get("DLTUTOR_SEEDS") or ROOT.parent / "shared" / "seeds")
    if not folder.is_dir():   # as tests/test_sources.py: the seeds sit beside a checkout, not in it
        pytest.skip(f"seed folder {folder} not found (set DLTUTOR_SEEDS to the seeds' folder)")
    seed = (folder / f"{landscape.SEED}.txt").read_text(encoding="utf-8")
    for row in landscape.LIBRARIES:
        assert row["seed 000 says"] in seed, row["library"]
    for label, line in landscape.SEED_LINES:
        assert line in seed and label in seed


def test_library_table_names_the_libraries_and_backends():
    t = landscape.table()
    assert [r["library"] for r in t] == ["MPI", "NCCL", "RCCL", "oneCCL", "Gloo"]
    md = t._repr_markdown_()
    assert md.count("\n|") == 2 + 5 and "| gloo |" in md and "“Portable, mature" in md
    assert "MPI & \\*CCL proven to 10 k+ GPUs" in md      # escaped: a literal star in Markdown
    assert "NCCL" in str(t) and "torch.distributed backend" in str(t) and "*CCL proven" in str(t)


def test_this_run_names_the_backend_the_ranks_reported():
    assert landscape.this_run({"world_size": 4, "backend": "gloo", "device": "cpu"}).startswith(
        "this run: gloo on CPU (4 ranks)")
    assert landscape.this_run({"world_size": 8, "backend": "nccl", "device": "cuda:0"}).startswith(
        "this run: nccl on GPU (8 ranks)")
    assert landscape.this_run({"world_size": 2, "hardware": "GPU/nccl"}).startswith("this run: nccl on GPU")


def test_hierarchical_crossover_and_rows():
    fast_in, slow_out = (2e-6, 1 / 100e9), (10e-6, 1 / 12.5e9)
    assert cm.hierarchical_crossover(16, 8, fast_in, slow_out) is None      # 2-D wins at every size
    x = cm.hierarchical_crossover(16, 8, slow_out, (10e-6, 1 / 100e9))      # slower links inside
    assert x and cm.hierarchical_saving(16, 8, x / 10, slow_out, (10e-6, 1 / 100e9)) > 0
    assert cm.hierarchical_saving(16, 8, x * 10, slow_out, (10e-6, 1 / 100e9)) < 0
    assert cm.hierarchical_saving(16, 8, x, slow_out, (10e-6, 1 / 100e9)) == pytest.approx(0, abs=1e-12)
    rows = cm.hierarchical_rows(16, 8, [1 << 10, 1 << 28], fast_in, slow_out)
    assert [r["D"] for r in rows] == [1 << 10, 1 << 28] and all(r["flat / 2-D"] > 1 for r in rows)
    assert rows[1]["flat ring (ms)"] == pytest.approx(cm.flat_ring_time(16, 8, 1 << 28, fast_in, slow_out) * 1e3)


def test_hierarchical_verdict_follows_the_model():
    fast_in, slow_out = (2e-6, 1 / 100e9), (10e-6, 1 / 12.5e9)
    assert cm.hierarchical_verdict(16, 8, fast_in, slow_out).endswith("2-D all-reduce is faster at every size")
    v = cm.hierarchical_verdict(16, 8, slow_out, (10e-6, 1 / 100e9))
    assert "the 2-D all-reduce is faster below D = " in v and v.endswith("the flat ring above it")
    assert cm.hierarchical_verdict(2, 2, (50e-6, 1e-9), (1e-6, 1e-9)).endswith("flat ring is faster at every size")


# ---------------------------------------------------------------- the "±" is the CI of the mean over passes
def _alternating(lo: float, hi: float, passes: int) -> dict:
    return {"algorithm": "x", "bytes": SIZES[0], "time_s": lo, "time_range_s": [lo, hi],
            "times_s": [lo if k % 2 else hi for k in range(passes)]}


def test_the_spread_is_the_ci_of_the_mean_over_passes_and_shrinks_with_more_passes():
    from dltutor.allreduce.sweep import pass_mean_ci
    from dltutor.core import spread
    few, many = _alternating(1e-3, 1.4e-3, 4), _alternating(1e-3, 1.4e-3, 20)
    assert pass_mean_ci(few) == pytest.approx(spread.mean_and_ci(few["times_s"]))
    assert pass_mean_ci(many)[1] < pass_mean_ci(few)[1] and pass_mean_ci(many)[1] < 0.2e-3   # half range: 0.2 ms
    assert np.isnan(pass_mean_ci({"time_s": 1e-3, "times_s": [1e-3]})[1])   # one pass: no interval


def test_a_gap_inside_the_half_range_is_decided_by_enough_passes():
    def run(passes):
        rows = []
        for alg, lo in (("ring", 1.0e-3), ("gloo", 1.2e-3)):
            rows.append(dict(_alternating(lo, lo + 0.4e-3, passes), algorithm=alg))
        return {"world_size": 2, "results": rows}
    assert INCONCLUSIVE in F.winner_findings(run(2))[0]
    assert "fastest ring" in F.winner_findings(run(20))[0]       # half ranges (±0.2 ms each) would cover it


def test_one_pass_gives_no_interval_and_decides_nothing():
    s = summary({"ring": [1e-3, 2e-3, 3e-3], "gloo": [2e-3, 4e-3, 6e-3]}, passes=1)
    lines = F.winner_findings(s)
    assert all(INCONCLUSIVE in x and "no interval" in x for x in lines), lines
