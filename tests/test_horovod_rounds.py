"""Notebook 03 (issue #42): Horovod, DDP and the sweep values launched in turns; a set-up's row
is over its launches, and verdicts pair set-ups within a round and say from the numbers why a gap
was not decided."""
from __future__ import annotations

import math
from pathlib import Path

import nbformat
import pytest

from dltutor.core.findings import INCONCLUSIVE
from dltutor.core.spread import mean_ci
from dltutor.horovod import findings as hf
from dltutor.horovod import rounds

MiB = 2 ** 20
NB = Path(__file__).resolve().parents[1] / "course/notebooks/03_horovod_synthetic_resnet50.ipynb"


def launch_row(engine, totals, step_s=0.5, cycle=50.0, fusion=32 * MiB):
    return {"engine": engine, "workers": 2, "device": "CPU", "model": "m", "batch_size": 4,
            "image_size": 32, "threads": 1, "cycle_time_ms": cycle, "fusion_threshold_bytes": fusion,
            "total_img_sec": sum(totals) / len(totals), "step_time_s": step_s, "iter_totals": totals}


def test_every_setup_is_launched_once_per_round_in_an_order_rotated_each_round():
    seen = []

    def fake(engine, nproc, args, env=None, timeout=0, echo=True, label=None):
        seen.append((label.split(" x")[0], engine, env))
        return launch_row(engine, [10.0, 11.0])
    setups = {"A": ("horovod", {}), "B": ("ddp", {}), "C": ("horovod", {"HOROVOD_CYCLE_TIME": "1"})}
    out = rounds.in_rounds(setups, 3, ["--tiny"], env={"X": "1"}, launch=fake, echo=None)
    assert [s[0] for s in seen] == ["A", "B", "C", "B", "C", "A", "C", "A", "B"]
    assert seen[2] == ("C", "horovod", {"X": "1", "HOROVOD_CYCLE_TIME": "1"})
    assert {k: [r["round"] for r in v] for k, v in out.items()} == {k: [1, 2, 3] for k in "ABC"}


def test_the_sweep_values_that_are_the_lab_s_own_are_not_launched_twice():
    cpu = rounds.lab_setups([0, MiB, 32 * MiB, 128 * MiB], [1, 10, 50])
    assert list(cpu) == [rounds.LAB, rounds.DDP, rounds.fusion_name(0), rounds.fusion_name(MiB),
                         rounds.fusion_name(128 * MiB), rounds.cycle_name(1), rounds.cycle_name(10)]
    assert cpu[rounds.cycle_name(1)] == ("horovod", {"HOROVOD_CYCLE_TIME": "1"})
    gpu = rounds.lab_setups([128 * MiB], [1, 50], on_gpu=True)    # Horovod's defaults on GPUs
    assert list(gpu) == [rounds.LAB, rounds.DDP, rounds.cycle_name(50)]


def test_a_pooled_row_is_the_mean_and_95_ci_over_its_launches_with_one_estimator():
    """Second read, item 10: iterations inside a launch move together, so the row's ± is over the
    launches, and its step time comes from the same img/s (workers x batch / img/s)."""
    rows = [launch_row("ddp", [10.0, 12.0, 11.0], 0.4), launch_row("ddp", [14.0, 13.0, 15.0], 0.6)]
    rows[0]["round"], rows[1]["round"] = 1, 2
    p = rounds.pooled(rows, "ddp x2")
    assert p["total_img_sec"] == pytest.approx(12.5) and p["iterations"] == 6 and p["launches"] == 2
    assert p["total_img_sec_ci"] == pytest.approx(mean_ci([11.0, 14.0])) == p["launch_ci"]
    assert p["step_time_s"] == pytest.approx(2 * 4 / 12.5)          # not the launches' mean 0.5
    assert p["step_time_ci_s"] == pytest.approx(p["step_time_s"] * mean_ci([11.0, 14.0]) / 12.5)
    assert p["round_img_sec"] == {1: 11.0, 2: 14.0}
    one = rounds.pooled(rows[:1], "one")          # one launch: no interval over launches
    assert math.isnan(one["total_img_sec_ci"]) and math.isnan(one["launch_ci"])


def test_sweep_points_take_the_lab_pool_and_the_pools_that_changed_that_setting():
    pools = {rounds.LAB: rounds.pooled([launch_row("horovod", [10.0, 10.5], 0.5)], "lab"),
             rounds.DDP: rounds.pooled([launch_row("ddp", [9.0, 9.5])], "ddp"),
             rounds.fusion_name(0): rounds.pooled([launch_row("horovod", [8.0, 8.5], 0.6, fusion=0)], "f0"),
             rounds.cycle_name(1): rounds.pooled([launch_row("horovod", [7.0, 7.5], 0.7, cycle=1.0)], "c1")}
    assert [(v, run) for v, _, _, run in rounds.sweep_points(pools, "fusion_threshold_bytes")] == [
        (0.0, "f0"), (float(32 * MiB), "lab")]
    assert [(v, run) for v, _, _, run in rounds.sweep_points(pools, "cycle_time_ms")] == [
        (1.0, "c1"), (50.0, "lab")]


def pool(engine, per_round):
    rows = [{**launch_row(engine, [v, v]), "round": k + 1} for k, v in enumerate(per_round)]
    return rounds.pooled(rows, engine)


def test_engines_launched_in_rounds_are_compared_by_a_ratio_paired_within_each_round():
    """Second read, item 1: launches drift ~2x over the rounds; pairing each round's launches
    decides what launch-level intervals (overlapping here) cannot."""
    h, d = pool("horovod", (10.03, 23.50, 18.83)), pool("ddp", (6.196, 10.959, 10.731))
    from dltutor.core.findings import differs
    assert not differs(h["total_img_sec"], d["total_img_sec"], h["total_img_sec_ci"], d["total_img_sec_ci"])
    said = hf.engines([h], [d])
    assert len(said) == 1 and "Horovod / DDP in each round: 1.62, 2.14, 1.75" in said[0]
    assert "Horovod faster than DDP in 3 of 3 rounds, 1.83x (95 % CI 1.27-2.62, paired by round, 3 rounds)" in said[0]
    mixed = hf.engines([pool("horovod", (10.0, 12.0, 9.0))], [pool("ddp", (11.0, 10.0, 9.5))])
    assert INCONCLUSIVE in mixed[0] and "rounds (not 3) would decide" in mixed[0]
    lone = hf.engines([pool("horovod", (20.0,))], [pool("ddp", (10.0,))])
    assert INCONCLUSIVE in lone[0] and "one round gives no interval" in lone[0]


def test_a_sweep_in_rounds_compares_each_value_with_the_lab_s_in_the_same_round():
    """Second read, items 2 and 6: the stored run's 10 ms / 50 ms per round (0.61, 0.95, 0.95)
    is inconclusive, and the remedy named is rounds, not iterations."""
    lab = [{**launch_row("horovod", [v, v]), "round": k + 1} for k, v in enumerate((10.0, 20.0, 18.0))]
    c10 = [{**launch_row("horovod", [v / s, v / s], cycle=10.0), "round": k + 1}
           for k, (v, s) in enumerate(zip((10.0, 20.0, 18.0), (0.61, 0.95, 0.95)))]
    fast = [{**launch_row("horovod", [v / s, v / s], fusion=0), "round": k + 1}
            for k, (v, s) in enumerate(zip((10.0, 20.0, 18.0), (0.80, 0.82, 0.81)))]
    launches = {rounds.LAB: lab, rounds.cycle_name(10): c10, rounds.fusion_name(0): fast}
    pools = {k: rounds.pooled(v, k) for k, v in launches.items()}
    fusion, cycle = hf.sweeps_by_round(pools, launches)
    assert "10 ms 0.82x (95 % CI 0.43-1.55, paired by round, 3 rounds)" in cycle
    assert f"which value is best is {INCONCLUSIVE}" in cycle and "rounds (not 3)" in cycle
    assert "timed iterations" not in cycle
    assert "Decided: 0 (off) gave a shorter step than 32 MiB." in fusion
    assert [v for v, _ in rounds.sweep_ratios(pools, launches, "cycle_time_ms")] == [10.0]
    first = {k: v[:1] for k, v in launches.items()}               # fast mode: one round
    one = hf.sweeps_by_round({k: rounds.pooled(v, k) for k, v in first.items()}, first)[1]
    assert "Every interval holds 1" not in one and "one round gives no interval" in one


def test_an_undecided_sweep_of_single_runs_says_how_far_its_closest_values_were():
    pts = [(1.0, 0.500, 0.010, "c1"), (10.0, 0.505, 0.010, "c10"), (50.0, 0.700, 0.010, "lab")]
    said = hf.sweep("HOROVOD_CYCLE_TIME", pts, lambda v: f"{v:g} ms", iterations=18)
    assert INCONCLUSIVE in said[1] and "Against the closest, 10 ms, the gap is 1.0%" in said[1]
    assert "more launches, in turns" in said[1] and "timed iterations" not in said[1]
    lone = hf.sweep("HOROVOD_CYCLE_TIME", [(1.0, 0.5, math.nan, "a"), (10.0, 0.6, math.nan, "b")])
    assert lone[1].endswith(f"which setting is best is {INCONCLUSIVE}.")


def _parameters(fast):
    import os
    from unittest import mock
    cell = next(c.source for c in nbformat.read(NB, as_version=4).cells
                if "parameters" in c.metadata.get("tags", []))
    with mock.patch.dict(os.environ, {"DLTUTOR_FAST": "1" if fast else "0"}):
        ns = {}
        exec(cell, ns)
    return ns


def test_notebook_03_launches_its_comparisons_in_rounds_sized_to_decide_in_full_mode():
    code = "\n".join(c.source for c in nbformat.read(NB, as_version=4).cells if c.cell_type == "code")
    assert "rounds.in_rounds(setups, ROUNDS, ROUND_ARGS" in code
    assert "hvd_findings.sweeps_by_round(pools, launches)" in code and "pools=pools, launches=launches" in code
    assert "paired_plots.plot_engines(hvd_pool, ddp_pool" in code and "plot_sweeps_by_round(pools, launches" in code
    assert 'run_benchmark("ddp"' not in code and "sweep_setting(" not in code
    full = _parameters(fast=False)
    assert full["ROUNDS"] >= 3 and full["ROUNDS"] * full["ROUND_ITERS"] >= 18
    assert len(rounds.lab_setups([m * MiB for m in full["FUSION_THRESHOLDS_MIB"]],
                                 full["CYCLE_TIMES_MS"])) == 7
    fast = _parameters(fast=True)            # fast mode: 3 launches, as many as before the rounds
    assert fast["ROUNDS"] == 1 and len(rounds.lab_setups(
        [m * MiB for m in fast["FUSION_THRESHOLDS_MIB"]], fast["CYCLE_TIMES_MS"])) == 3
