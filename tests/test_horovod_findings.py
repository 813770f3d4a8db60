"""Notebook 03's findings: each sentence follows the numbers (either engine / setting can win, or
the spreads cover the gap and it says so)."""
from __future__ import annotations

import pytest

from dltutor.core.findings import INCONCLUSIVE
from dltutor.horovod import findings as hf
from dltutor.horovod.runs import SEED_1GPU_TOTAL, SEED_2GPU_TOTAL


@pytest.fixture(autouse=True)
def full_mode(monkeypatch):
    monkeypatch.setenv("DLTUTOR_FAST", "0")


def row(engine, workers, total, conf_per_worker):
    """A run whose total img/s has a 95 % CI of workers x `conf_per_worker` (`runs.iteration_ci`)."""
    return {"engine": engine, "workers": workers, "total_img_sec": total,
            "img_sec_per_worker": total / workers, "total_img_sec_ci": workers * conf_per_worker}


def test_engines_horovod_wins_ddp_wins_or_inconclusive():
    fast_hvd = hf.engines([row("horovod", 2, 100.0, 1.0)], [row("ddp", 2, 80.0, 1.0)])
    assert fast_hvd == ["2 workers: Horovod 100 img/s vs DDP 80 img/s: Horovod is 1.25x DDP "
                        "(the gap, 20 img/s, is larger than their 95 % intervals, ±2 and ±2, combined: ±2.83)."]
    slow_hvd = hf.engines([row("horovod", 2, 60.0, 1.0)], [row("ddp", 2, 80.0, 1.0)])
    assert "Horovod is 0.75x DDP" in slow_hvd[0]
    noisy = hf.engines([row("horovod", 2, 78.0, 5.0)], [row("ddp", 2, 80.0, 5.0)])
    assert INCONCLUSIVE in noisy[0] and "x DDP" not in noisy[0]
    assert hf.engines([row("horovod", 1, 50.0, 1.0)], [row("ddp", 2, 80.0, 1.0)]) == []


def test_scaling_of_one_launch_each_draws_no_verdict_and_shows_the_seed_as_a_reference():
    """Second read, item 7: 1 and 2 workers are one launch each, not in turns: their iteration
    intervals do not hold the drift between them, so no verdict; the seed's efficiency is a
    reference from other hardware, printed beside, not tested against."""
    def say(total_2, conf_2, loads=(None, None)):
        return hf.scaling([{**row("horovod", 2, total_2, conf_2), "load_1m": loads[1]},
                           {**row("horovod", 1, 50.0, 0.1), "load_1m": loads[0]}])
    good = say(2 * 50.0 * 0.968, 0.1)        # far apart beyond the iteration intervals: still no verdict
    assert good[0].startswith("2 workers 96.8 img/s in total vs 1 worker 50 img/s: 1.94x, inconclusive here")
    assert "one launch each, one after the other and not in turns" in good[0] and "load" in good[0]
    assert "0.97 measured here" in good[1] and "seed 001" in good[1] and "not tested against it" in good[1]
    poor = say(55.0, 0.1, loads=(3.0, 11.5))
    assert "below it by" not in poor[1] and "0.55 measured here" in poor[1] and "(no 95 % interval)" in poor[1]
    assert "(1-minute load average 3.0 at the 1-worker launch, 11.5 at the 2-worker launch)" in poor[0]
    assert hf.SEED_EFFICIENCY == pytest.approx(SEED_2GPU_TOTAL / SEED_1GPU_TOTAL / 2)


def test_scaling_says_fast_mode(monkeypatch):
    monkeypatch.setenv("DLTUTOR_FAST", "1")
    out = hf.scaling([row("horovod", 1, 50.0, 0.1), row("horovod", 2, 90.0, 0.1)])
    assert out[0].startswith("FAST MODE")


def points(*step_ms_and_spread):
    return [(v, ms / 1000, sp / 1000, f"run {v}") for v, (ms, sp) in zip((1, 10, 50), step_ms_and_spread)]


def test_sweep_names_the_best_value_either_way_or_a_tie():
    low_wins = hf.sweep("HOROVOD_CYCLE_TIME", points((100, 2), (150, 2), (200, 2)))
    assert "rises as HOROVOD_CYCLE_TIME grows" in low_wins[0]
    assert "HOROVOD_CYCLE_TIME=1 gave the shortest step" in low_wins[1]
    assert "beyond the spreads" in low_wins[1]
    high_wins = hf.sweep("HOROVOD_CYCLE_TIME", points((200, 2), (150, 2), (100, 2)))
    assert "falls" in high_wins[0] and "HOROVOD_CYCLE_TIME=50 gave the shortest step" in high_wins[1]
    tie = hf.sweep("HOROVOD_CYCLE_TIME", points((100, 30), (110, 30), (200, 2)))
    assert "=1 gave the shortest step" in tie[1] and INCONCLUSIVE in tie[1] and "but 10 is" in tie[1]
    assert "nothing to rank" in hf.sweep("X", points((100, 2)))[0]


def test_findings_labels_the_fusion_values_and_reads_the_timeline():
    fusion = [(0.0, 0.2, 0.001, "off"), (32 * 2 ** 20, 0.1, 0.001, "lab")]
    out = hf.findings([row("horovod", 1, 50.0, 0.1), row("horovod", 2, 90.0, 0.1)],
                      [row("horovod", 2, 90.0, 0.1)], [row("ddp", 2, 95.0, 0.1)], fusion,
                      points((100, 2), (150, 2)), {"all-reduce": 30.0, "negotiation": 10.0,
                                                    "gloo_allreduce": 20.0, "queue": 5.0})
    text = "\n".join(out)
    assert "HOROVOD_FUSION_THRESHOLD=32 MiB gave the shortest step" in text and "0 (off)" in text
    assert "add up to all-reduce 30 ms, negotiation 10 ms" in text and "not shares of the run" in text
    assert "gloo_allreduce took the most (20 ms, summed the same way)" in text
    assert "no negotiation" in hf.timeline({})[0]


def test_timeline_shares_are_wall_clock_and_negotiation_is_waiting():
    """Issue #42: summed spans of many tensors overlap (they can exceed the run), so no share is taken
    of their sum; the wall-clock union is the share; a negotiation span is waiting (skew)."""
    from dltutor.horovod.plots import Span, phase_totals, phase_wall
    spans = [Span(f"t{i}", "NEGOTIATE_ALLREDUCE", 0.0, 90_000.0, 0) for i in range(10)]   # 10 x 90 ms, together
    spans += [Span("t0", "ALLREDUCE", 90_000.0, 100_000.0, 0), Span("t1", "ALLREDUCE", 95_000.0, 100_000.0, 0),
              Span("t0", "GLOO_ALLREDUCE", 91_000.0, 99_000.0, 1)]
    totals, wall = phase_totals(spans), phase_wall(spans)
    assert totals["negotiation"] == 900.0 and wall["negotiation"] == 90.0
    assert wall["all-reduce"] == 10.0 and wall["traced"] == 100.0
    text = hf.timeline(totals, wall)
    assert text[0].startswith("Rank 0's timeline covers 100 ms; some tensor was in negotiation during 90 ms of it (90%)")
    assert "in an all-reduce during 10 ms of it (10%)" in text[0]
    assert "negotiation 900 ms, all-reduce 15 ms: more than the time traced" in text[1]
    assert "(90%)" not in text[1] and "%" not in text[1]
    assert "skew" in text[-1] and "not what the protocol's messages cost" not in text[-1]   # second read, item 8
    assert "next background cycle" in text[-1] and "queueing behind earlier all-reduces" in text[-1]
    assert not any("(98%)" in s or "(2%)" in s for s in text)   # no share of the overlapping sums


def _lab(step_s=0.1, conf=1.0):
    return {"workers": 2, "step_time_s": step_s, "step_time_ci_s": step_s * conf / 10.0,
            "img_sec_per_worker": 10.0,
            "fusion_threshold_bytes": 32 * 2 ** 20, "cycle_time_ms": 50.0, "run": "horovod 2"}


def test_dark_bars_say_whether_they_are_the_run_above_or_a_new_run():
    """Issue #42: a sweep reuses the run above only when the lab's value is not in its list."""
    from dltutor.horovod.plots import dark_bar
    fresh = [(0.0, 0.2, 0.01, "HOROVOD_FUSION_THRESHOLD=0"),
             (32.0 * 2 ** 20, 0.098, 0.001, "HOROVOD_FUSION_THRESHOLD=33554432")]
    reused = [(1.0, 0.2, 0.01, "HOROVOD_CYCLE_TIME=1"), (50.0, 0.1, 0.01, "horovod 2 (run above)")]
    assert dark_bar(fresh, _lab(), "fusion_threshold_bytes") == "a new run, same settings as the run above"
    assert dark_bar(reused, _lab(), "cycle_time_ms") == "the 2-worker run above"
    assert dark_bar(reused[:1], _lab(), "cycle_time_ms") == "not in this sweep"
    pooled = [(50.0, 0.1, 0.01, "horovod (lab settings) x2, 3 launches")]
    assert dark_bar(pooled, _lab(), "cycle_time_ms") == "the lab-setting launches of the rounds"


def test_the_scaling_launch_is_set_beside_the_rounds_launches_once_without_a_verdict():
    """Second read, item 3: one sentence (not one per sweep), naming that the sizes differ, and the
    launch-to-launch spread that the iteration intervals do not hold."""
    two = {**row("horovod", 2, 8.38, 0.39), "run": "horovod x2"}
    lab = {"launch_means": [10.0, 23.5, 18.8]}
    said = hf.rerun(two, lab)
    assert len(said) == 1 and "its own warm-up and iteration sizes" in said[0]
    assert "gave 10, 23.5, 18.8 img/s: outside their range" in said[0] and "by 2.35x" in said[0]
    assert "inside their range" in hf.rerun({**two, "total_img_sec": 12.0}, lab)[0]
    lone = hf.rerun(two, {"launch_means": [10.0]})[0]            # fast mode: one round
    assert "0.84x apart" in lone and "not seen here" in lone and "range" not in lone


def test_notebook_03_prints_each_finding_and_its_takeaways_state_no_outcome():
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/03_horovod_synthetic_resnet50.ipynb",
                       as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for call in ("hvd_findings.scaling(", "hvd_findings.engines(", "hvd_findings.sweeps_by_round(",
                 "hvd_findings.timeline(", "hvd_findings.findings("):
        assert f"findings.show({call}" in code, f"notebook 03 should print {call}...)"
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for seen in ("land close to each other", "expect an efficiency well below", "they\nusually overlap"):
        assert seen not in md, f"notebook 03 states an outcome in prose: {seen!r}"


def test_notebook_03_reads_the_dark_bars_and_the_negotiation_right():
    """Issue #42: the dark bars are not always the run above; negotiation shares are wall-clock."""
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/03_horovod_synthetic_resnet50.ipynb",
                       as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    md = " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    assert "The dark bars are the 2-worker run above" not in md and "the lab-setting launches of the rounds" in md
    assert "hvd_findings.rerun(two, hvd_pool)" in code
    assert "hvd_findings.timeline(totals, wall)" in code and "cycle, totals, wall," in code
    assert "what negotiation, fusion and the all-reduce cost" not in md and "the wait for the next background cycle" in md
    assert "Only the engine that averages the gradients differs" not in md and "forked from the course's warm launcher" in md
    assert "could move if the run were repeated" not in md and "A slow minute then slows all of them" not in md
    assert "cycle time matters more on CPU workers than on GPUs" not in md and "there the cycle costs the compute nothing" not in md


def test_the_run_s_interval_is_the_95_ci_of_its_iterations_not_the_benchmark_sigma():
    """Issue #42: a row's ± is the 95 % CI of the mean total img/s over the timed iterations (the
    ranks' rates of each iteration summed): more iterations with the same variation shrink it, the
    benchmark's 1.96 sigma of single iterations would not; one iteration gives none (nan), and the
    findings then say inconclusive instead of deciding."""
    import math

    from dltutor.core.spread import mean_ci
    from dltutor.horovod.runs import iteration_ci

    def metrics(iters):
        return [{"img_sec": iters, "step_time_s": 0.5}, {"img_sec": [2 * r for r in iters], "step_time_s": 0.4}]
    got = iteration_ci(metrics([10.0, 12.0, 11.0]))
    assert got["total_img_sec_ci"] == pytest.approx(mean_ci([30.0, 36.0, 33.0]))
    assert got["iter_totals"] == [30.0, 36.0, 33.0]      # kept: rounds.pooled pools them over launches
    assert got["step_time_ci_s"] == pytest.approx(0.5 * got["total_img_sec_ci"] / 33.0)
    more = iteration_ci(metrics([10.0, 12.0, 11.0] * 4))["total_img_sec_ci"]
    assert more < got["total_img_sec_ci"] / 3
    one = iteration_ci(metrics([10.0]))
    assert math.isnan(one["total_img_sec_ci"]) and math.isnan(one["step_time_ci_s"])
    lone = [row("horovod", 2, 100.0, math.nan), row("horovod", 1, 50.0, math.nan)]
    said = hf.scaling(lone)
    assert INCONCLUSIVE in said[0] and "±n/a" in said[0]
    assert "no 95 % interval" in said[1] and "below it by" not in said[1]
    assert INCONCLUSIVE in hf.engines([row("horovod", 2, 100.0, math.nan)], [row("ddp", 2, 50.0, 1.0)])[0]


def test_notebook_03_explains_its_pm_and_shows_the_ci_not_the_sigma():
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/03_horovod_synthetic_resnet50.ipynb",
                       as_version=4)
    text = " ".join(" ".join(c.source.split()) for c in nb.cells)
    assert "95 % confidence interval of a run's mean img/s" in text
    assert '"img_sec_conf"' not in text and "1.96-sigma" not in text
    assert text.count('err="total_img_sec_ci"') == 1        # the scaling runs; the rounds draw the paired interval
    assert "paired_plots.plot_engines(" in text and "plots.plot_setting_sweeps(" not in text
