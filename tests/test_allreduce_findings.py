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
    assert all("fastest ring" in s and "ring is 0.50x gloo" in s for s in lines[:-1]), lines
    assert lines[-1].startswith("these lines make 3 paired comparisons at 95 % each")
    b_wins = summary({"ring": [2e-3, 4e-3, 6e-3], "gloo": [1e-3, 2e-3, 3e-3]})
    assert all("fastest gloo" in s for s in F.winner_findings(b_wins)[:-1])
    close = summary({"ring": [1.00e-3] * 3, "gloo": [1.05e-3] * 3}, passes=4)
    for r in close["results"]:          # passes that swap the order: the pairs disagree
        r["times_s"] = [r["time_s"] * f for f in ((1, 1.3, 1, 1.3) if r["algorithm"] == "ring" else (1.3, 1, 1.3, 1))]
    lines = F.winner_findings(close)[:-1]
    assert all(INCONCLUSIVE in s and "fastest" not in s for s in lines), lines
    assert lines[0].startswith("N = 2, D = 1 KiB")


def test_a_winner_must_beat_every_other_algorithm_not_only_the_runner_up():
    # second read, item 4: gloo ahead of the runner-up by median (decided), not of reduce_bcast
    rows = [{"algorithm": alg, "bytes": SIZES[0], "time_s": min(ts), "times_s": ts} for alg, ts in (
        ("gloo", [1.0, 1.0, 1.0, 1.0]), ("recursive_doubling", [1.5, 1.6, 1.5, 1.6]),
        ("reduce_bcast", [2.5, 0.8, 2.5, 0.8]))]
    line = F.winner_findings({"world_size": 2, "results": rows})[0]
    assert "no single winner" in line and "gloo is 0.65x recursive_doubling" in line
    assert "gloo / reduce_bcast" in line and "the interval includes 1x" in line
    rows[2]["times_s"] = [2.5, 2.4, 2.5, 2.6]
    line = F.winner_findings({"world_size": 2, "results": rows})[0]
    assert "fastest gloo (ahead of each of the 2 others)" in line


# ---------------------------------------------------------------- α of the ring vs the ping-pong
def test_fit_findings_report_the_alpha_ratio_each_way():
    pp = modelled("pingpong", alpha=20e-6)
    big = summary({"ring": modelled("ring", alpha=60e-6), "reduce_bcast": modelled("reduce_bcast", scale=0.5),
                   "recursive_doubling": modelled("recursive_doubling", scale=2.0)}, pingpong=pp,
                  spread=0.1, passes=5)
    lines = F.fit_findings(big, cm.compare_fits(big))
    assert lines[0].startswith("the ring's minimax α-β fit is usable: within a factor 1.00")
    lines = lines[1:]
    # issue #42 (05 c14): the same criterion and statistic for both α, and per-pass fits by rank test
    assert "the ring's α 60 µs vs the ping-pong's α 20 µs (both minimax fits to the fastest pass" in lines[0]
    assert "3.00x" in lines[0] and "the ring's α is the larger (rank test" in lines[0]
    # model lines drawn with the ring's alpha vs the FASTEST pass (what the fit uses), and the
    # markdown's expectation (lines above the points when the ring's α is larger) checked
    assert lines[1].startswith("reduce_bcast at 1 KiB, fastest pass") and "sits above the point" in lines[1]
    assert "as section 3 expects" in lines[1]
    assert lines[2].startswith("recursive_doubling at 1 KiB") and "sits below the point" in lines[2]
    assert "that expectation fails here" in lines[2]
    assert "ring: the model with the ring's minimax α, β is within a factor 1.00 of the fastest pass" in lines[3]
    # a model that misses an algorithm by 2x says so, and is not usable for it
    assert "reduce_bcast: the model with the ring's minimax α, β misses its fastest pass by up to 2.4x too high (at 1 KiB" in lines[4]
    assert "does not describe reduce_bcast" in lines[4]
    small = summary({"ring": modelled("ring", alpha=10e-6)}, pingpong=pp)
    assert "0.50x" in F.fit_findings(small, cm.compare_fits(small))[1]
    assert INCONCLUSIVE in F.fit_findings(small, cm.compare_fits(small))[1]   # 3 passes: p >= 0.1
    # ping-pong too fast to resolve alpha: say so rather than divide by zero
    flat = summary({"ring": modelled("ring")}, pingpong=[d * 1e-9 for d in SIZES])
    assert "not resolved" in F.fit_findings(flat, cm.compare_fits(flat))[1]


def test_pair_findings_put_the_measurement_beside_the_model():
    s = summary({"reduce_bcast": [1e-3, 2e-3, 4e-3], "ring": [1e-3, 2e-3, 2e-3]}, spread=0.01)
    lines = F.pair_findings(s, "reduce_bcast", "ring", 50e-6, 1e-9)
    assert len(lines) == 2 and INCONCLUSIVE in lines[0] and "D = 1 KiB" in lines[0]
    assert "reduce_bcast is 2.00x ring" in lines[1] and "D = 1 MiB" in lines[1]
    # issue #42 (05 c14): the model misses these reduce_bcast points by far: no model ratio for it
    assert all("No model ratio: the model does not describe reduce_bcast" in x for x in lines)
    on_model = summary({"reduce_bcast": modelled("reduce_bcast"), "ring": modelled("ring")})
    lines = F.pair_findings(on_model, "reduce_bcast", "ring", 50e-6, 1e-9)
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
    same = hier_summary([t * 1.01 for t in ring], spread=0.1)
    for r in same["results"]:          # the hierarchical passes go the other way round: pairs disagree
        if r["algorithm"] == "hierarchical":
            r["times_s"] = r["times_s"][::-1]
    same = F.hierarchical_findings(same)
    assert all(INCONCLUSIVE in s for s in same[3:])
    # issue #42 (05 c24): a measured ratio below the model's interval says why (Python steps, cores)
    assert "beat the flat ring by more than the α-β model allows" in faster[-1]
    assert "6 isend/irecv steps in Python" in faster[-1] and "shared" not in faster[-1]
    shared = F.hierarchical_findings(hier_summary([t / 2 for t in ring]), cores=2)
    assert "4 ranks shared 2 core(s)" in shared[-1]
    assert not any("model allows" in x for x in slower)
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
    # fast links inside the node: 2-D wins at every size; slower ones inside too (the flat ring's
    # steps then wait for the slow intra-node link: the slower of the two, not always the inter one)
    assert np.all(cm.hierarchical_saving(16, 8, np.array([1e3, 1e9]), intra, inter) > 0)
    assert np.all(cm.hierarchical_saving(16, 8, np.array([1e3, 1e9]), inter, intra) > 0)
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
    assert cm.hierarchical_crossover(16, 8, slow_out, fast_in) is None      # slower links inside: too
    rows = cm.hierarchical_rows(16, 8, [1 << 10, 1 << 28], fast_in, slow_out)
    assert [r["D"] for r in rows] == [1 << 10, 1 << 28] and all(r["flat / 2-D"] > 1 for r in rows)
    assert rows[1]["flat ring (ms)"] == pytest.approx(cm.flat_ring_time(16, 8, 1 << 28, fast_in, slow_out) * 1e3)


def test_flat_ring_waits_for_the_slower_link():
    # the second read's numbers: 2 x 2 with the links swapped (slow 10 us, 12.5 GB/s inside the node)
    fast, slow = (2e-6, 1 / 100e9), (10e-6, 1 / 12.5e9)
    flat = [cm.flat_ring_time(2, 2, d, slow, fast) * 1e3 for d in (2**10, 2**20, 2**28)]
    assert flat == pytest.approx([0.0601, 0.186, 32.3], rel=0.01)
    assert cm.flat_ring_time(2, 2, 2**20, slow, fast) == cm.flat_ring_time(2, 2, 2**20, fast, slow)
    rng = np.random.default_rng(0)                # 2-D never loses in this model, whichever link is slow
    for _ in range(200):
        a, b = [(10 ** rng.uniform(-7, -4), 10 ** rng.uniform(-12, -9)) for _ in range(2)]
        m, l = int(rng.integers(2, 17)), int(rng.integers(2, 9))
        assert np.all(cm.hierarchical_saving(m, l, cm.CROSSOVER_GRID, a, b) >= -1e-15)


def test_hierarchical_verdict_follows_the_model():
    fast_in, slow_out = (2e-6, 1 / 100e9), (10e-6, 1 / 12.5e9)
    for m, l in ((2, 2), (16, 8)):
        for links in ((fast_in, slow_out), (slow_out, fast_in)):
            assert cm.hierarchical_verdict(m, l, *links).endswith("2-D all-reduce is faster at every size")
    assert cm.hierarchical_verdict(2, 2, (50e-6, 1e-9), (1e-6, 1e-9)).endswith("2-D all-reduce is faster at every size")


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
    lines = F.winner_findings(s)[:-1]
    assert all(INCONCLUSIVE in x and "no interval" in x for x in lines), lines


def test_a_winner_in_every_pass_is_decided_even_when_the_machine_was_busy():
    """Issue #42 (05 c16): each pass times every algorithm together; ring 0.8x gloo in every pass,
    while passes 2-5 were 5-50x slower for both: paired per pass it is decided (the means' unpaired
    intervals would cover the gap)."""
    load = (1, 5, 20, 50, 8)
    rows = [{"algorithm": alg, "bytes": SIZES[0], "time_s": k * 1e-3, "time_range_s": [k * 1e-3, 50 * k * 1e-3],
             "times_s": [k * 1e-3 * x for x in load]} for alg, k in (("ring", 0.8), ("gloo", 1.0))]
    line = F.winner_findings({"world_size": 2, "results": rows})[0]
    assert "fastest ring" in line and "ring is 0.80x gloo" in line and "ring faster in 5 of 5" in line


def test_the_alpha_beta_free_limits_are_checked_even_without_a_fit():
    # second read, "missed": reduce_bcast / ring -> 2x for large D and 1x for small D at N = 2
    from dltutor.allreduce import limits
    assert limits.limit("reduce_bcast", "ring", 2, "large") == 2.0 and limits.limit("reduce_bcast", "ring", 2, "small") == 1.0
    assert limits.limit("recursive_doubling", "ring", 2, "small") == 0.5
    assert limits.limit("recursive_doubling", "ring", 2, "large") == 1.0
    rows = []
    for d, rb, ring in ((1024, [0.3, 0.4, 0.35, 0.3], [1.0, 1.0, 1.0, 1.0]),
                        (64 << 20, [2.0, 2.1, 1.9, 2.0], [1.0, 1.0, 1.0, 1.0])):
        rows += [{"algorithm": "reduce_bcast", "bytes": d, "time_s": min(rb), "times_s": rb},
                 {"algorithm": "ring", "bytes": d, "time_s": 1.0, "times_s": ring}]
    small, large = limits.limit_findings({"world_size": 2, "results": rows})
    assert "D = 1 KiB" in small and "tends to 1.00x" in small and "which excludes 1.00x" in small
    assert "D = 64 MiB" in large and "tends to 2.00x" in large and "which includes 2.00x" in large


def test_alpha_of_oversubscribed_ranks_is_named_scheduling_delay():
    # second read, item 11: a "usable" fit with α = 2,626 µs on 4 ranks and 2 cores is not a latency
    ring = modelled("ring", n=4)
    lines = F.hierarchical_findings(hier_summary(ring), cores=2)
    assert any("with 4 ranks on 2 core(s)" in x and "not the latency of a link" in x for x in lines)
    assert not any("not the latency of a link" in x for x in F.hierarchical_findings(hier_summary(ring), cores=8))
