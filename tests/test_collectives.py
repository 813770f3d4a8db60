"""dltutor.allreduce.ring / cost / collectives: the step model, the α-β fit, the real ring on gloo."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import slurm_jobs

from dltutor.allreduce import cost as cm
from dltutor.allreduce import ring as rm
from dltutor.core import units

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "course" / "labs" / "05_allreduce" / "allreduce_bench.py"
HIER_LAB = LAB.with_name("hierarchical_allreduce.py")
WORKER = Path(__file__).resolve().parent / "collectives_worker.py"


# ---------------------------------------------------------------- step model
@pytest.mark.parametrize("n", range(1, 17))
@pytest.mark.parametrize("length", [1, 2, 3, 5, 7, 8, 16, 17, 100, 1001])
def test_step_model_ends_with_full_sum_everywhere(n, length):
    states = rm.ring_steps(n, length)
    assert len(states) == 2 * (n - 1) + 1
    last = states[-1]
    for r in range(n):
        for c in range(n):
            assert sorted(last.held[r][c]) == list(range(n)), (n, length, r, c)
    assert rm.ring_final_ok(states)


@pytest.mark.parametrize("n", range(2, 17))
def test_after_reduce_scatter_each_rank_owns_one_complete_chunk(n):
    mid = rm.ring_steps(n, 10 * n + 3)[n - 1]
    assert mid.phase == "reduce-scatter" and mid.phase_step == n - 1
    for r in range(n):
        complete = [c for c in range(n) if mid.complete(r, c)]
        assert complete == [rm.owner_after_reduce_scatter(r, n)] == [(r + 1) % n]
    # and every chunk is complete on exactly one rank
    owners = sorted(rm.owner_after_reduce_scatter(r, n) for r in range(n))
    assert owners == list(range(n))


def test_seed_labels_on_eight_ranks():
    """The TACC slides (seed 004, dltutor.core.sources): letter = the rank's data, digit = chunk."""
    from dltutor.core.sources import QUOTES
    states = rm.ring_steps(8, 64)
    assert states[0].label(3, 0) == "D0" and states[0].label(0, 7) == "A7"   # P0 holds A0..A7
    assert " ".join(states[0].label(0, c) for c in range(8)) + "P0" == QUOTES["ring_start_p0"].text
    assert " ".join(states[1].label(0, c) for c in range(8)) + "P0" == QUOTES["ring_step1_p0"].text
    assert " ".join(states[1].label(1, c) for c in range(8)) + "P1" == QUOTES["ring_step1_p1"].text
    assert states[2].label(0, 6) == "A6+H6+G6"          # two reduce-scatter steps, as on the slide
    assert QUOTES["ring_step2_p0"].has(states[2].label(0, 6))
    assert QUOTES["ring_step2_p7"].has(states[2].label(7, 5))   # "H5+G5+F5"
    assert states[2].phase_text == "reduce-scatter step 2 of 7 (the slides' Reduce Phase)"
    assert states[7].label(7, 0) == "H0+G0+F0+E0+D0+C0+B0+A0"  # P7 owns chunk 0
    assert states[7].label(7, 0, max_terms=3) == "A0…H0"     # the slides' "A0 … H0"
    assert states[3].label(0, 5, max_terms=3) == "A5+…+F5 (4)"
    assert states[9].phase_text == "all-gather step 2 of 7 (the slides' Scatter Phase)"
    assert rm.label(6, (0, 7, 6), style="chunk-letter") == "G0+G7+G6"


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_steps_send_the_chunk_the_formula_names(n):
    """Steps are numbered 1..N-1 per phase; in step s rank r sends chunk (r - s + 1) mod N
    (reduce-scatter) and (r - s + 2) mod N (all-gather), the formula notebook 05 states."""
    states = rm.ring_steps(n, 4 * n)
    for st in states[1:]:
        assert 1 <= st.phase_step <= n - 1
        shift = 1 if st.phase == "reduce-scatter" else 2
        assert [(m.src, m.dst, m.chunk) for m in st.sends] == [
            (r, (r + 1) % n, (r - st.phase_step + shift) % n) for r in range(n)]
        assert all(m.chunk == rm.sent_chunk(m.src, st.phase_step, n, st.phase) for m in st.sends)
    # step 1 moves chunk r from rank r to rank r+1 (the slide: P1 gets B0+A0)
    assert [m.chunk for m in states[1].sends] == list(range(n))
    with pytest.raises(ValueError, match="1 .. N-1"):
        rm.sent_chunk(0, 0, n)


@pytest.mark.parametrize("n,length", [(4, 3), (5, 2), (3, 10), (7, 100), (16, 1000), (8, 1 << 20)])
def test_chunks_and_bytes_follow_array_split(n, length):
    bounds = rm.chunk_bounds(length, n)
    sizes = [b - a for a, b in bounds]
    assert sizes == [len(x) for x in np.array_split(np.arange(length), n)]
    states = rm.ring_steps(n, length, itemsize=4)
    for st in states[1:]:
        assert st.bytes_step == sum(sizes[m.chunk] * 4 for m in st.sends)
    assert states[-1].bytes_total == 2 * (n - 1) * length * 4  # each element crosses 2(N-1) links
    if length % n == 0:  # the slide's 2(N-1)/N * D per rank
        assert states[-1].bytes_per_rank == 2 * (n - 1) * length * 4 // n


def test_modelled_time_matches_formula():
    n, d, alpha, beta = 8, 8 << 20, 5e-6, 1e-9
    st = rm.ring_steps(n, d // 4, itemsize=4, alpha=alpha, beta=beta)
    assert st[-1].elapsed == pytest.approx(cm.ring_time(n, d, alpha, beta), rel=1e-12)
    assert cm.ring_time(n, d, alpha, beta) == pytest.approx(2 * 7 * (alpha + d / 8 * beta))


# ---------------------------------------------------------------- cost models and fit
def test_fit_recovers_known_alpha_beta():
    sizes = np.array([2.0 ** k for k in range(0, 27, 2)])
    for alg, n in (("pingpong", 2), ("ring", 4), ("recursive_doubling", 6)):
        t = cm.model_time(alg, n, sizes, 25e-6, 0.4e-9)
        a, b = cm.fit_alpha_beta(sizes, t, algorithm=alg, n=n)
        assert a == pytest.approx(25e-6, rel=1e-6) and b == pytest.approx(0.4e-9, rel=1e-6)
    noisy = t * np.random.default_rng(0).uniform(0.95, 1.05, t.size)
    a, b = cm.fit_alpha_beta(sizes, noisy, algorithm="recursive_doubling", n=6)
    assert a == pytest.approx(25e-6, rel=0.1) and b == pytest.approx(0.4e-9, rel=0.1)
    # minimax: the same exact answer on clean data, and a largest error no larger than lsq's
    a, b = cm.fit_alpha_beta(sizes, t, algorithm="recursive_doubling", n=6, criterion="minimax")
    assert a == pytest.approx(25e-6, rel=1e-4) and b == pytest.approx(0.4e-9, rel=1e-4)
    rough = t * np.random.default_rng(1).uniform(0.7, 1.3, t.size)

    def worst(criterion):
        fit = cm.fit_alpha_beta(sizes, rough, "recursive_doubling", 6, criterion=criterion)
        return cm.relative_errors(rough, cm.model_time("recursive_doubling", 6, sizes, *fit)).max()
    assert worst("minimax") < worst("lsq") - 0.01
    with pytest.raises(ValueError, match="criterion"):
        cm.fit_alpha_beta(sizes, t, criterion="l1")


def test_compare_fits_on_a_lab_summary():
    sizes = [2.0 ** k for k in range(10, 27, 4)]
    alpha, beta = 30e-6, 0.5e-9
    ring = cm.model_time("ring", 2, np.array(sizes), alpha, beta)
    ring[1] *= 1.4   # one noisy size
    summary = {"world_size": 2,
               "results": [{"algorithm": "ring", "bytes": d, "time_s": t} for d, t in zip(sizes, ring)],
               "pingpong": [{"bytes": d, "time_s": float(cm.model_time("pingpong", 2, d, alpha, beta))}
                            for d in sizes]}
    fits = cm.compare_fits(summary)
    # issue #42 (05 c14): a minimax ping-pong fit too, so the two α compare on the same criterion
    assert list(fits) == ["ping-pong, lsq", "ping-pong, minimax", "ring, lsq", "ring, minimax"]
    assert fits["ping-pong, minimax"][0] == pytest.approx(alpha, rel=1e-3)
    a, b, err = fits["ping-pong, lsq"]   # the clean ping-pong gives back alpha and beta...
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6)
    assert err[1] == pytest.approx(0.4 / 1.4) and len(err) == len(sizes)  # ...and the ring's error
    assert fits["ring, minimax"][2].max() < fits["ring, lsq"][2].max()
    assert np.array_equal(cm.model_errors(summary, "ring", a, b), err)


def test_bandwidths_and_models():
    assert cm.algbw(1e9, 2.0) == 5e8
    assert cm.busbw(1e9, 2.0, 4) == pytest.approx(5e8 * 1.5)
    assert cm.busbw(1e9, 2.0, 1) == 0
    assert cm.model_time("reduce_bcast", 4, 100, 1.0, 0.01) == pytest.approx(6 * (1 + 1))
    assert cm.model_time("tree", 8, 100, 1.0, 0.01) == pytest.approx(6 * 2)
    assert cm.model_time("recursive_doubling", 8, 100, 1.0, 0.01) == pytest.approx(3 * 2)
    assert cm.model_time("recursive_doubling", 6, 100, 1.0, 0.01) == pytest.approx(4 * 2)
    # ring loses to recursive doubling for tiny messages and wins for big ones
    x = cm.crossover_bytes("ring", "recursive_doubling", 8, 10e-6, 1e-9)
    assert x and cm.model_time("ring", 8, x / 10, 10e-6, 1e-9) > cm.model_time(
        "recursive_doubling", 8, x / 10, 10e-6, 1e-9)
    assert cm.model_time("ring", 8, x * 10, 10e-6, 1e-9) < cm.model_time(
        "recursive_doubling", 8, x * 10, 10e-6, 1e-9)
    assert units.parse_bytes("64MiB") == 64 << 20 and units.parse_bytes("1k") == 1024
    assert units.fmt_bytes(64 << 20) == "64 MiB"
    with pytest.raises(ValueError):
        units.parse_bytes("lots")


# ---------------------------------------------------------------- real collectives on gloo
def launched(script, nproc, tmp_path, *args, timeout=240):
    """(metrics by rank, every rank's output) of `nproc` ranks forked from the warm start
    (slurm_jobs.on_this_machine). These tests check the collectives, not the launcher:
    test_launch_forms runs the labs under torchrun."""
    run = slurm_jobs.on_this_machine(script, nproc, args, tmp_path / "launch", timeout,
                                     env={"DLTUTOR_DIST_TIMEOUT": "120"})
    return sorted(run["metrics"], key=lambda m: m["rank"]), run["output"]


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_point_to_point_allreduce_equals_dist_all_reduce(nproc, tmp_path):
    metrics, _ = launched(WORKER, nproc, tmp_path)
    assert [m["rank"] for m in metrics] == list(range(nproc))
    for m in metrics:
        assert m["failures"] == [], m["failures"]
        for numel, nbytes in m["ring_bytes"].items():  # the real ring sends what the model says
            model = rm.ring_steps(nproc, int(numel), itemsize=8)
            expect = sum(s.nbytes for st in model for s in st.sends if s.src == m["rank"])
            assert nbytes == expect, (m["rank"], numel)


@pytest.mark.slow
def test_lab_tiny_on_two_ranks_prints_parsable_summary(tmp_path):
    metrics, out = launched(LAB, 2, tmp_path, "--tiny")
    assert len(metrics) == 1 and metrics[0]["rank"] == 0 and metrics[0]["world_size"] == 2
    s = metrics[0]
    assert s["checks"] == {"ring": True, "reduce_bcast": True, "recursive_doubling": True, "gloo": True}
    algs = {r["algorithm"] for r in s["results"]}
    assert algs == {"ring", "reduce_bcast", "recursive_doubling", "gloo"}
    assert {r["bytes"] for r in s["results"]} == {1024, 64 << 10, 1 << 20}
    for r in s["results"]:
        assert r["time_s"] > 0 and r["busbw_GBps"] == pytest.approx(r["algbw_GBps"])  # N=2: factor 1
    assert len(s["pingpong"]) == 3 and s["alpha_s"] >= 0 and s["beta_s_per_byte"] >= 0
    assert "busbw GB/s" in out and "ring" in out


@pytest.mark.slow
def test_hierarchical_allreduce_on_four_ranks_as_two_nodes(tmp_path):
    """4 gloo ranks as 2 "nodes" x 2: the groups are {0,1},{2,3} inside and {0,2},{1,3} across, and
    the 2-D all-reduce equals dist.all_reduce (int64 exactly, float32 allclose; the lab exits 1
    on a mismatch)."""
    metrics, out = launched(HIER_LAB, 4, tmp_path, "--tiny", "--per-node", "2")
    assert [m["rank"] for m in metrics] == [0, 1, 2, 3]
    assert [m["groups"] for m in metrics] == [
        {"intra": [0, 1], "inter": [0, 2]}, {"intra": [0, 1], "inter": [1, 3]},
        {"intra": [2, 3], "inter": [0, 2]}, {"intra": [2, 3], "inter": [1, 3]}]
    s = metrics[0]
    assert s["per_node"] == 2 and s["nodes"] == 2 and s["backend"] == "gloo"
    assert len(s["checks"]) == 4 and all(s["checks"].values()), s["checks"]
    assert {r["algorithm"] for r in s["results"]} == {"hierarchical", "ring", "gloo"}
    assert all(r["time_s"] > 0 for r in s["results"]) and "check hierarchical" in out


def test_hierarchical_lab_runs_as_one_process():
    p = subprocess.run([sys.executable, str(HIER_LAB), "--tiny", "--passes", "1"], capture_output=True,
                       text=True, timeout=240, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 node(s) x 1" in p.stdout and "intra-node group [0]" in p.stdout


def test_lab_help_shows_defaults():
    p = subprocess.run([sys.executable, str(LAB), "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    for flag in ("--sizes", "--iters", "--warmup", "--passes", "--algorithms", "--dtype", "--tiny",
                 "--mode"):
        assert flag in p.stdout
    assert "(default: 20)" in " ".join(p.stdout.split())


RING_T = 2 * 15 * 5e-6 + 2 * 15 / 16 * 256 * 2**20 * 1e-10     # notebook 05's quiz, in seconds


def test_ring_exercise_check_accepts_the_answer_and_explains_a_wrong_one(capsys):
    import numpy as np
    for T, owner in ((RING_T, 15), (np.float64(RING_T), np.int64(15)), (RING_T * 1.005, 15)):
        assert rm.check_ring_exercise(T, owner) is True      # numbers are numbers
        assert "P15 owns chunk 0" in capsys.readouterr().out
    assert rm.check_ring_exercise(RING_T * 1.05, 15) is False   # a printed verdict, no traceback
    assert "Not yet: T = " in (out := capsys.readouterr().out) and "not the model's time" in out
    assert "2(N-1)" not in out and "268435456" not in out            # the formula is not given away
    assert rm.check_ring_exercise(RING_T, 15.0) is False
    assert "whole number" in capsys.readouterr().out
    assert rm.check_ring_exercise(None, None) is False


def test_ring_exercise_check_names_milliseconds_and_never_gives_the_owner_away(capsys):
    assert rm.check_ring_exercise(50.48, 15) is False                      # ms where s is asked
    assert "is it in milliseconds? The answer is asked in seconds" in capsys.readouterr().out
    for wrong in [r for r in range(16) if r != 15] + [16, -1]:
        assert rm.check_ring_exercise(RING_T, wrong) is False
        out = capsys.readouterr().out
        assert out.startswith("Not yet:") and f"rank {wrong} " in out
        for leak in ("15", "mod", "r + 1", "P1"):
            assert leak not in out.replace(f"rank {wrong} ", "").replace("0 to 15", ""), (wrong, out)


def test_receive_buffer_is_kept_between_calls():
    import torch
    from dltutor.allreduce import collectives as C
    a = C.scratch(1000, torch.float32, "cpu")
    b = C.scratch(10, torch.float32, "cpu")            # smaller: a view of the same memory
    assert b.numel() == 10 and b.data_ptr() == a.data_ptr()
    c = C.scratch(5000, torch.float32, "cpu")          # larger: grown once, then kept
    assert c.numel() == 5000 and C.scratch(4000, torch.float32, "cpu").data_ptr() == c.data_ptr()
    assert C.scratch(10, torch.float64, "cpu").dtype == torch.float64   # one buffer per dtype
