"""How often to save (dltutor.checkpoint.goodput) and lab 10's seeded random kills (--fail-mtbf).

Young's and Daly's intervals and the two goodput models against values worked out by hand; the
kill schedule (dltutor.checkpoint.restarts.failure_plan) is a function of (seed, attempt) alone and
exponential with the given mean; the sentences and the plot come from a study's numbers. One real
2-rank run of lab 10 under launch(max_restarts=...) (the warm start): a --kill-at kill on attempt 0
and a --fail-mtbf kill on attempt 1 (seed 33477: its plan is checked first), which must end with the
uninterrupted run's parameters bit for bit.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dltutor.checkpoint import goodput, restarts
from dltutor.launch.run import launch

LAB = Path(__file__).resolve().parents[1] / "course" / "labs" / "10_checkpoint" / "train.py"


def test_young_and_daly_against_hand_values():
    # C = 0.19 s, M = 60 s: sqrt(22.8) = 4.7749; Daly: x = C/2M = 0.0015833,
    # 4.7749 * (1 + 0.039791/3 + 0.0015833/9) - 0.19 = 4.7749 * 1.013440 - 0.19 = 4.6491
    assert goodput.young_interval(0.19, 60) == pytest.approx(4.77493, abs=1e-5)
    assert goodput.daly_interval(0.19, 60) == pytest.approx(4.64911, abs=1e-5)
    assert goodput.daly_interval(3.0, 1.0) == 1.0            # C >= 2M: save every M
    # tau = 4, C = 0.2, R = 5, M = 60: 1 - 0.05 - (2 + 5)/60 = 0.83333
    assert goodput.first_order_goodput(4, 0.2, 5, 60) == pytest.approx(0.833333, abs=1e-6)
    # 4 / (60 e^(5/60) (e^(4.2/60) - 1)) = 4 / (60 * 1.086904 * 0.072508) = 4 / 4.72858 = 0.84592
    assert goodput.expected_goodput(4, 0.2, 5, 60) == pytest.approx(0.84592, abs=1e-5)


def test_young_maximises_the_first_order_model():
    taus = np.linspace(0.5, 20, 4000)
    best = taus[np.argmax([goodput.first_order_goodput(t, 0.19, 5, 60) for t in taus])]
    assert best == pytest.approx(goodput.young_interval(0.19, 60), abs=0.01)


def test_a_runs_goodput_comes_from_its_own_numbers():
    from dltutor.launch.results import LaunchResult
    # rank 0: (0.7 s loop - 0.2 s saves) / 50 steps = 0.01 s; rank 1: 0.008 s
    res = LaunchResult(0, 3.0, [{"rank": 0, "loop_s": 0.7, "saves": [[10, 0.15], [20, 0.05]],
                                 "losses": [0.1] * 50, "startup_s": 1.0},
                                {"rank": 1, "loop_s": 0.6, "saves": [[10, 0.1], [20, 0.1]],
                                 "losses": [0.1] * 50, "startup_s": 0.9}])
    got = goodput.accounting(res, steps=100, every=20)      # the slowest rank: 0.01 s, 1.0 s
    assert got["useful_s"] == pytest.approx(1.0) and got["spent_s"] == pytest.approx(2.0)
    assert got["goodput"] == pytest.approx(0.5) and got["interval_s"] == pytest.approx(0.2)
    assert got["saves"] == 4                                # steps 20, 40, 60, 80 (not the last)
    same_work = goodput.accounting(res, steps=100, every=20, step_s=0.005)   # the uninterrupted step
    assert same_work["useful_s"] == pytest.approx(0.5) and same_work["interval_s"] == pytest.approx(0.1)
    assert same_work["step_s"] == pytest.approx(0.01)       # its own step time is still reported
    assert goodput.accounting(res, steps=100, every=200)["saves"] == 0


def test_the_kill_schedule_is_seeded_and_exponential():
    assert restarts.failure_plan(3.0, 7, 1, 2) == restarts.failure_plan(3.0, 7, 1, 2)
    assert restarts.failure_plan(3.0, 7, 1, 2) != restarts.failure_plan(3.0, 7, 2, 2)
    assert restarts.failure_plan(3.0, 7, 1, 2) != restarts.failure_plan(3.0, 8, 1, 2)
    plans = [restarts.failure_plan(3.0, s, a, 4) for s in range(100) for a in range(10)]
    times = [t for t, _ in plans]
    assert stats.kstest(times, stats.expon(scale=3.0).cdf).pvalue > 0.01
    assert {r for _, r in plans} == {0, 1, 2, 3}


def study(kills=(1, 2, 1)):
    rows = [{"x_young": k, "every_steps": e, "interval_s": e * 0.003, "kills": n, "steps_redone": 9,
             "useful_s": 3.0, "spent_s": 3.0 / g, "goodput": g, "first_order": 0.5, "expected": 0.6,
             "bit_for_bit": b, "saves": sv}
            for k, e, n, g, b, sv in zip((0.25, 1, 4), (30, 120, 480), kills, (0.7, 0.8, 0.6),
                                         (True, True, False), (33, 8, 2))]
    return {"rows": rows, "save_s": 0.025, "saves_timed": 40, "restarts_timed": 4,
            "calibration": {"save_s": 0.03, "restart_s": 1.5, "young_s": goodput.young_interval(0.03, 3.0)},
            "restart_s": 0.4, "mtbf_s": 3.0, "steps": 1000,
            "young_s": goodput.young_interval(0.025, 3.0), "daly_s": goodput.daly_interval(0.025, 3.0),
            "step_s": 0.003, "ceiling": 0.95, "fast": True,
            "label": "CPU/gloo, 2 ranks, fast mode"}


def test_findings_come_from_the_numbers():
    text = "\n".join(goodput.findings(study()))
    assert "CPU/gloo, 2 ranks, fast mode" in text and "ASSUMED" in text
    assert "C = 0.025 s" in text and "R = 0.40 s" in text and "goodput 95.0%: the ceiling" in text
    assert "warm server" in text and "cold start" in text          # what R is, and is not
    assert "multiples of Young's interval from the calibration run (C = 0.030 s): 0.424 s" in text
    # 80.0 % vs 70.0 %: 10 points; one kill more at 1x: 0.4 + 0.18 s on 3.75 s spent -> ~10.8 points
    assert "Highest goodput in this run: saving every 120 steps (1x Young's), 80.0%, 10.0 points " \
           "above the next (0.25x, 70.0%)" in text and "inconclusive in this run" in text
    assert "Measured minus Daly's exact model: +10 points at 0.25x, +20 points at 1x, +0 points at 4x" in text
    assert "kills per run (and the number its time spent would expect at M = 3 s): 1 at 0.25x (1.4), " \
           "2 at 1x (1.2), 1 at 4x (1.7)" in text
    assert "No save fell inside" not in text
    assert "2 of 3 runs ended with the uninterrupted run's parameters bit for bit" in text
    assert "NOT every 480" in text
    assert "419 unexpected interruptions in 54 days" in text and "that paper's figure" in text
    other = study(kills=(0, 3, 5))
    other["rows"][0].update(goodput=0.99, spent_s=3.0 / 0.99)
    other["rows"][2]["saves"] = 0
    text = "\n".join(goodput.findings(other))
    assert "0 at 0.25x (1.0), 3 at 1x (1.2), 5 at 4x (1.7)" in text
    assert "saving every 30 steps (0.25x Young's), 99.0%, 19.0 points above the next (1x, 80.0%), " \
           "more than one kill's worth" in text
    # the runner-up lost a whole run's work per kill (no save in it): one kill decides -> inconclusive
    close = study(kills=(0, 3, 1))
    close["rows"][0].update(goodput=0.95, spent_s=3.0 / 0.95)   # 15 points above; its own kill: ~12
    close["rows"][1].update(interval_s=50.0, saves=0)
    assert "inconclusive in this run" in "\n".join(goodput.findings(close))
    assert "No save fell inside the run at 4x (an interval of 480 steps or more in a run of 1000 " \
           "steps)" in text


def test_the_plot_is_labelled():
    import matplotlib
    matplotlib.use("Agg")
    ax = goodput.plot(study())
    assert "CPU/gloo" in ax.get_title() and "fast mode" in ax.get_title() and "assumed" in ax.get_title()
    assert [t.get_text() for t in ax.texts] == ["1 kill", "2 kills", "1 kill"]
    assert len(ax.get_lines()) == 5        # two models, the measured points, ceiling, Young's
    assert "Young" in str(goodput.table(study())) or "× Young" in str(goodput.table(study()))


SEED, MTBF = 33477, 5.0     # attempt 0: no random kill for 20 s of training; 1: 0.06 s; 2: 25 s


def test_a_run_with_seeded_kills_ends_bit_for_bit(tmp_path):
    plan = [restarts.failure_plan(MTBF, SEED, a, 2) for a in range(3)]
    assert plan[0][0] > 20 and plan[1][0] < 0.25 and plan[2][0] > 20, plan
    base = ["--tiny", "--steps", "100", "--save-every", "10"]
    ref = launch(LAB, nproc=2, args=[*base, "--ckpt-dir", str(tmp_path / "ref")],
                 log_dir=tmp_path / "ref-logs", echo=False, timeout=180)
    res = launch(LAB, nproc=2, args=[*base, "--ckpt-dir", str(tmp_path / "run"), "--kill-at", "25",
                                     "--fail-mtbf", str(MTBF), "--fail-seed", str(SEED)],
                 log_dir=tmp_path / "run-logs", echo=False, timeout=240, max_restarts=5)
    assert res.restart_count == 2, [r.cause for r in res.restarts]
    assert [r.ranks for r in res.restarts] == [[1], [plan[1][1]]]
    back = restarts.read_restarts(tmp_path / "run")
    assert len(back) == 2 and back[0]["killed_step"] == 25 and back[0]["steps_redone"] == 5, back
    killed = back[1]["killed_step"]         # 0.06 s into attempt 1's loop: a step after 20
    assert 20 < killed < 100 and back[1]["kill_where"].endswith("into attempt 1"), back
    newest = 10 * ((killed - 1) // 10)      # the newest complete checkpoint before that kill
    assert back[1]["steps_redone"] == killed - newest and back[1]["killed_rank"] == plan[1][1]
    assert all(b["kill_to_training_s"] > 0 for b in back)
    last = res.metrics
    assert [m["restart_count"] for m in last] == [2, 2] and last[0]["resumed_from"] == newest
    assert last[0]["fail_plan"] == [plan[2][0], plan[2][1]]
    assert last[0]["steps"] == 100 and not math.isnan(last[0]["loop_s"])
    assert last[0]["startup_s"] > 0
    assert last[0]["param_digest"] == ref.metrics[0]["param_digest"]      # bit for bit
