"""Notebook 06 / lab 06: tensor and pipeline parallelism against one process, the bubble, 3D placement.

The multi-process test runs both labs (--tiny) in one 2-rank launch (tests/model_parallel_worker.py).
"""
from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path

import pytest

from dltutor.core.course import lab
from dltutor.launch.run import launch
from dltutor.model_parallel import mesh as M
from dltutor.model_parallel import pipeline as P

WORKER = Path(__file__).with_name("model_parallel_worker.py")
TOL = 1e-5


@pytest.fixture(scope="module")
def two_ranks():
    res = launch(WORKER, nproc=2, threads=1, echo=False, timeout=600)
    return res.metrics


# ---------------------------------------------------------------- tensor parallel
def test_tp_blocks_match_one_process(two_ranks):
    for m in two_ranks:
        for b in m["tp"]["blocks"]:
            assert b["out_err"] < TOL and b["dx_err"] < TOL and b["grad_err"] < TOL, b
            assert b["dtensor_out_err"] < TOL and b["dtensor_grad_err"] < TOL, b
            assert b["scratch_vs_dtensor_err"] < TOL, b
            assert b["params_per_rank"] < b["params_full"], "the split must actually split"


def test_tp_one_allreduce_each_way_of_the_formula_bytes(two_ranks):
    for b in two_ranks[0]["tp"]["blocks"]:
        assert (b["allreduce_forward"], b["allreduce_backward"]) == (1, 1)
        assert b["bytes_forward"] == b["bytes_backward"] == b["formula_bytes"]
        assert b["dtensor_collectives"]["forward"] == 1  # RowwiseParallel's one all-reduce


def test_tp_whole_is_timed_on_one_process_alone(two_ranks):
    from dltutor.core.env import cpu_cores
    first, second = (m["tp"]["blocks"] for m in two_ranks)
    for b0, b1 in zip(first, second):
        assert len(b0["ms_whole_runs"]) == len(b0["ms_split_runs"]) == b0["timed_runs"]
        assert b1["ms_whole_runs"] == [] and len(b1["ms_split_runs"]) == b1["timed_runs"]  # rank 1 waited
        assert b0["whole_threads"] == min(2, cpu_cores())      # the cores the 2 ranks share


# ---------------------------------------------------------------- pipeline
def test_pipeline_schedules_match_one_process(two_ranks):
    checks = two_ranks[-1]["pp"]["checks"]  # the last stage holds the losses
    assert {c["schedule"] for c in checks} == {"gpipe", "1f1b"}
    for c in checks:
        assert c["loss_err"] < TOL and c["grad_err"] < TOL, c


def test_pipeline_records_every_microbatch_and_schedule_shape(two_ranks):
    runs = two_ranks[0]["pp"]["runs"]
    assert {(r["schedule"], r["m"]) for r in runs} == {("gpipe", 1), ("gpipe", 2), ("gpipe", 4),
                                                       ("1f1b", 2), ("1f1b", 4)}
    for r in runs:
        for ev in r["events"]:
            assert sorted((k, i) for k, i, _, _ in ev) == sorted(
                (k, i) for k in "FB" for i in range(r["m"]))
        assert 0 < r["bubble"] < 1 and r["formula"] == P.bubble_formula(2, r["m"])
        # GPipe holds all m micro-batches' activations; 1F1B at most p - stage
        assert r["in_flight"] == ([r["m"], r["m"]] if r["schedule"] == "gpipe" else [2, 1])
    assert two_ranks[0]["pp"]["work"].startswith("SLEEP stand-in")


@contextlib.contextmanager
def _pipeline_lab_alone(monkeypatch, record, steps: int):
    """Lab 06's pipeline.py as a module in this process (one gloo rank), each step's schedule and
    micro-batch input handed to `record` before it runs: yields (module, args, ctx, partition)."""
    import types

    import torch
    import torch.distributed as dist
    spec = importlib.util.spec_from_file_location("pipeline_lab", lab("06_model_parallel/pipeline.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    real_step = mod.P.run_step
    monkeypatch.setattr(mod.P, "run_step", lambda sched, stage, x, *a: record(sched, x)
                        or real_step(sched, stage, x, *a))
    args = mod.parse_args(["--tiny", "--steps", str(steps)])
    own = not dist.is_initialized()
    if own:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ctx = types.SimpleNamespace(rank=0, world_size=1, device=torch.device("cpu"))
        _, _, part = mod.stage_setup(args, ctx)
        yield mod, args, ctx, part
    finally:
        if own:
            dist.destroy_process_group()


def test_pipeline_lab_interleaves_the_schedules_at_each_m(monkeypatch):
    """timed() runs GPipe and 1F1B one step each per round, the order rotated every round."""
    order = []
    with _pipeline_lab_alone(monkeypatch, lambda sched, x: order.append(type(sched).__name__), 3) as (
            mod, a, ctx, part):
        out = mod.timed(["gpipe", "1f1b"], 2, a, ctx, part)
    g, f = "ScheduleGPipe", "Schedule1F1B"
    assert order == [g, f, f, g, g, f, f, g]        # warm-up round, then 3 timed rounds, rotated
    assert [r["schedule"] for r in out] == ["gpipe", "1f1b"]
    assert all(len(r["bubbles"]) == len(r["steps_s"]) == len(r["overlaps"]) == 3 for r in out)


def test_busy_shares_count_overlap_and_idle():
    events = [[("F", 0, 0.0, 1.0), ("B", 0, 3.0, 4.0)], [("F", 0, 0.5, 2.0)]]
    assert P.busy_shares(events) == pytest.approx((0.5 / 4, 1.0 / 4))
    assert P.busy_shares(ideal_gpipe(2, 1, 1.0, 2.0))[0] == 0     # a strict hand-over: no overlap


def test_bubble_formula():
    assert P.bubble_formula(1, 8) == 0
    assert P.bubble_formula(2, 4) == pytest.approx(0.2)
    assert P.bubble_formula(4, 1) == pytest.approx(0.75)
    assert [P.bubble_formula(4, m) for m in (1, 2, 4, 8)] == sorted(
        [P.bubble_formula(4, m) for m in (1, 2, 4, 8)], reverse=True)
    with pytest.raises(ValueError):
        P.bubble_formula(0, 4)


def ideal_gpipe(p, m, tf, tb):
    """Event records of a GPipe step with equal stages and no communication cost."""
    fwd_end = (m + p - 1) * tf
    return [[("F", i, (s + i) * tf, (s + i + 1) * tf) for i in range(m)]
            + [("B", i, fwd_end + (p - 1 - s + i) * tb, fwd_end + (p - s + i) * tb)
               for i in range(m)] for s in range(p)]


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (4, 3), (4, 16)])
def test_measured_bubble_of_an_ideal_step_is_the_formula(p, m):
    events = ideal_gpipe(p, m, tf=1.0, tb=2.0)
    assert P.measured_bubble(events) == pytest.approx(P.bubble_formula(p, m))
    assert [P.max_in_flight(ev) for ev in events] == [m] * p


def test_stage_slice_needs_equal_cuts():
    assert P.stage_slice(8, 4, 2) == slice(4, 6)
    with pytest.raises(ValueError, match="equal stages"):
        P.stage_slice(6, 4, 0)


# ---------------------------------------------------------------- 3D placement
def test_reference_layout_is_torch_device_mesh(two_ranks):
    c = M.Cluster()
    torch_coords = two_ranks[0]["mesh"]
    assert torch_coords, "rank 0 placed no fake DeviceMesh"
    for rank, coords in torch_coords.items():
        assert tuple(coords) == M.reference_coords(int(rank), c)


def test_exercise_check_passes_the_reference_and_the_seed_answer():
    c = M.Cluster()
    out = M.check_placement(lambda r: M.reference_coords(r, c), c)
    assert out["ok"] and out["reference"]["tp"] == 0
    # stages counted from 0 as in the tables; seed 001 counts from 1 ("between stages 2 and 3")
    assert out["yours"]["pp_hops_across_nodes"] == [(1, 2)]
    assert "between stages 1 and 2" in M.verdict(out)


@pytest.mark.parametrize("fn,why", [
    (lambda r: (r // 8, r % 4, (r // 4) % 2), "span two nodes"),   # TP across nodes
    (lambda r: (0, 0, 0), "one rank per"),                            # not a placement
    (lambda r: 1 / 0, "raised ZeroDivisionError"),                    # the student's bug
    (lambda r: (r % 4, r // 4), "three numbers"),
])
def test_exercise_check_fails_bad_placements(fn, why):
    out = M.check_placement(fn)
    assert not out["ok"] and why in " ".join(out["problems"])


def test_step_bytes_follow_the_forms():
    c = M.Cluster()
    b = M.step_bytes(hidden=1024, layers=8, seq=128, micro_batch=1, microbatches=4, params=1e6, c=c)
    act = 128 * 1024 * 2
    assert b["tp"] == pytest.approx(4 * 2 * 4 * 1.5 * act)  # 4 per layer, 2 layers, 4 mb, ring 2*3/4
    assert b["pp"] == 2 * 4 * act and b["dp"] == pytest.approx(1e6 * 2 / 16)
    alone = M.step_bytes(1024, 8, 128, 1, 4, 1e6, M.Cluster(nodes=1, gpus_per_node=1, tp=1, pp=1, dp=1))
    assert alone["tp"] == alone["pp"] == alone["dp"] == 0


@pytest.mark.parametrize("script,argv,flag", [
    ("pipeline.py", ["--microbatches", "2,0"], "--microbatches"),
    ("pipeline.py", ["--sleep-ms", "-1"], "--sleep-ms"),
    ("tp_mlp.py", ["--heads", "3"], "--heads"),
])
def test_lab_refuses_bad_input(script, argv, flag, capsys):
    spec = importlib.util.spec_from_file_location(f"lab06_{script[:-3]}", lab(f"06_model_parallel/{script}"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as exc:
        mod.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and flag in err and "Traceback" not in err


def test_pipeline_lab_interleaves_every_m_in_rounds(monkeypatch):
    """timed_all() runs one step of every (m, schedule) per round, the m's rotated every round, so
    step i of m=2 and of m=4 met the same moment of the machine (issue 42, second read, item 1)."""
    order = []
    with _pipeline_lab_alone(monkeypatch, lambda sched, x: order.append(len(x) // 4), 2) as (
            mod, a, ctx, part):
        out = mod.timed_all({2: ["gpipe"], 4: ["gpipe"]}, a, ctx, part)
    assert order == [2, 4, 4, 2, 2, 4]              # micro-batches per step: warm-up, then 2 rounds, rotated
    assert [r["m"] for r in out] == [2, 4] and all(r["m_in_rounds"] and len(r["bubbles"]) == 2 for r in out)
