"""Notebook 04, section 4 (issue #42): the stages are run in rotated rounds, their speeds compared
over the rounds, an undecided gap says why from its numbers, and memory is treated as a count."""
import importlib.util
import json
import math
from collections import Counter
from pathlib import Path

import pytest

from dltutor.core.findings import INCONCLUSIVE
from dltutor.core.spread import mean_ci
from dltutor.zero import findings, rounds, runs

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "course" / "labs" / "04_deepspeed"
NB = ROOT / "course" / "notebooks" / "04_deepspeed_out_of_core_bert.ipynb"


def _lab():
    spec = importlib.util.spec_from_file_location("sweep_zero_under_test", LAB / "sweep_zero.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_lab_rotates_the_configs_every_round_and_balances_who_follows_whom():
    order = _lab().rotated(["A", "B", "C"], rounds=4)
    assert order == [(0, "A"), (0, "B"), (0, "C"), (1, "B"), (1, "A"), (1, "C"),
                     (2, "C"), (2, "A"), (2, "B"), (3, "C"), (3, "B"), (3, "A")]
    assert _lab().rotated(["A", "B"]) == [(0, "A"), (0, "B")]          # one round: as before
    five = _lab().rotated(list("ABCDE"), rounds=10)
    positions = {c: sorted(i % 5 for i, (_, x) in enumerate(five) if x == c) for c in "ABCDE"}
    assert all(p == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4] for p in positions.values())
    after = Counter((a, b) for (ra, a), (rb, b) in zip(five, five[1:]) if ra == rb)
    # a plain rotation puts A after E in every round; reversing odd rounds halves that
    assert after[("E", "A")] == after[("B", "A")] == 4 and len(after) == 10


def _metrics(config, rnd, step_s, measured=1000.0, rank=0):
    n = len(step_s)
    return dict(config=config, round=rnd, rank=rank, samples_per_s=8 * n / sum(step_s),
                step_s=step_s, model_state_bytes={"total": measured * 2**20},
                predicted={"model_states": 1000.0 * 2**20}, params=10, losses=[1.0])


def test_speed_over_rounds_is_the_ci_of_the_round_throughputs_warm_up_round_left_out():
    # 8 samples per step; the first timed step (memory meter) takes 9 s and is left out
    ms = [_metrics("zero0", 0, [9.0, 8.0, 8.0]), _metrics("zero0", 1, [9.0, 1.0, 3.0]),
          _metrics("zero0", 2, [9.0, 2.0, 2.0]), _metrics("zero0", 3, [9.0, 4.0, 4.0]),
          _metrics("zero0", 0, [9.0, 1.0, 1.0], rank=1)]
    row = rounds.rows_over_rounds(ms, ["zero0"], nproc=2)[0]
    # round 0 is the warm-up; round 1: 16 samples in 4 s = 4/s (the mean of 8/s and 2.67/s is not)
    assert row["round_rates"] == pytest.approx([None, 4.0, 4.0, 2.0])
    assert row["warmup_rates"] == pytest.approx([1.0])
    assert row["samples_per_s"] == pytest.approx(10 / 3)
    assert row["samples_per_s_spread"] == pytest.approx(mean_ci([4.0, 4.0, 2.0]))
    assert row["repeats"] == 3 and row["repeat_kind"] == "rounds" and row["steps_per_round"] == 2
    two = rounds.rows_over_rounds(ms[1:3], ["zero0"], nproc=2)[0]   # 2 rounds: none left out
    assert two["round_rates"] == pytest.approx([4.0, 4.0]) and two["warmup_rates"] == []
    one = rounds.rows_over_rounds(ms[:1], ["zero0"], nproc=2)[0]    # one round: its own steps
    assert one["repeat_kind"] == "steps" and one["repeats"] == 2
    assert one["samples_per_s_spread"] == pytest.approx(0.0)


def test_sweep_asks_the_lab_for_the_rounds(monkeypatch):
    seen = {}

    class Result:
        metrics = [_metrics("zero0", r, [9.0, 1.0 + r, 1.0 + r]) for r in range(2)]

    def fake_launch(script, nproc, args, **kw):
        seen["args"], seen["timeout"] = args, kw["timeout"]
        return Result()

    monkeypatch.setattr(runs, "launch", fake_launch)
    rows, _ = runs.sweep(["zero0"], 2, dict(num_layers=2), rounds=2)
    assert seen["args"][seen["args"].index("--rounds") + 1] == "2"
    assert seen["timeout"] == 2 * 900          # the launch's time limit grows with the rounds
    assert rows[0]["repeats"] == 2 and rows[0]["round_rates"] == pytest.approx([8.0, 4.0])


def _row(config, sps, spread, repeats=10, kind="rounds", measured=(100.0,)):
    return dict(config=config, label=runs.LABELS[config], samples_per_s=sps,
                samples_per_s_spread=spread, repeats=repeats, repeat_kind=kind,
                measured_rounds=list(measured))


def test_an_undecided_speed_gap_says_why_from_its_numbers():
    base = _row("zero0", 10.0, 0.3)
    line = findings.speed_findings([base, _row("zero1", 10.2, 0.4)])[0]
    assert INCONCLUSIVE in line and "Why: the gap is 2.0 % of stage 0's rate" in line
    assert "±5.0 % over 10 rounds" in line
    need = math.ceil(10 * (0.5 / 0.2) ** 2)
    assert f"about {need} rounds" in line
    decided = findings.speed_findings([base, _row("zero3", 5.0, 0.4)])[0]
    assert INCONCLUSIVE not in decided and "Why" not in decided


def test_memory_is_a_count_checked_across_rounds():
    same = findings.count_findings([_row("zero0", 1, 1, measured=(100.0, 100.0, 100.0)),
                                    _row("zero3", 1, 1, measured=(50.0, 50.0, 50.0))])
    assert "no interval needed" in same[0] and "all 3 rounds: stage 0, stage 3" in same[0]
    assert len(same) == 1
    moved = findings.count_findings([_row("zero0", 1, 1, measured=(100.0, 101.0))])
    assert "changed between rounds: stage 0 (100.0-101.0 MiB)" in moved[-1]
    assert "one round here" in findings.count_findings([_row("zero0", 1, 1)])[0]


def test_notebook_04_runs_the_sweep_in_rounds_in_full_mode_only():
    cells = json.loads(NB.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert "SWEEP_ROUNDS = pick(10, 1)" in code          # fast mode keeps one round
    assert "rounds=SWEEP_ROUNDS" in code and "findings.count_findings(rows)" in code


def test_paired_by_round_ratio_is_the_verdict_geometric_mean_and_log_interval():
    # the machine swings 10x between rounds; stage 3 runs at 0.7x stage 0 within every round
    base_rates = [2.0, 20.0, 5.0, 12.0]
    base = dict(_row("zero0", sum(base_rates) / 4, mean_ci(base_rates), repeats=4),
                round_rates=base_rates)
    slow = [0.7 * x * f for x, f in zip(base_rates, (1.02, 0.98, 1.01, 0.99))]
    z3 = dict(_row("zero3", sum(slow) / 4, mean_ci(slow), repeats=4), round_rates=slow,
              steps_per_round=2)
    lines = findings.speed_findings([base, z3])
    p = rounds.paired_ratio(z3, base)
    logs = [math.log(s / b) for s, b in zip(slow, base_rates)]
    assert p["n"] == 4 and p["ratio"] == pytest.approx(math.exp(sum(logs) / 4))
    assert p["lo"] == pytest.approx(math.exp(sum(logs) / 4 - mean_ci(logs)))
    assert lines[0].startswith(f"stage 3 / stage 0 = {p['ratio']:.3f} (95 % CI {p['lo']:.3f}-")
    assert "stage 3 is slower than stage 0" in lines[0] and "rests on 2 timed step(s)" in lines[0]
    assert lines[1].startswith("Unpaired means (an illustration, not the verdict)")
    assert INCONCLUSIVE in lines[1] and "rounds spread 10.0x (2-20 samples/s)" in lines[1]
    same = dict(z3, round_rates=[x * f for x, f in zip(base_rates, (1.2, 0.8, 1.1, 0.9))])
    undecided = findings.speed_findings([base, same])[0]
    assert INCONCLUSIVE in undecided and "Why: the effect is" in undecided
    assert "narrowing it to the effect would take about" in undecided
    steps = dict(z3, repeat_kind="steps")           # one round: no pairs, the unpaired verdict
    assert len(findings.speed_findings([base, steps])) == 1
    assert rounds.paired_ratio(steps, base) is None


def test_table_and_plot_use_the_paired_ratio_and_offload_is_paired_with_stage3():
    base_rates, slow = [2.0, 20.0, 5.0], [1.5, 14.0, 3.6]
    base = dict(_row("zero0", 9.0, 9.0, repeats=3), round_rates=base_rates, measured=100.0)
    z3 = dict(_row("zero3", 6.4, 6.0, repeats=3), round_rates=slow, measured=50.0)
    off = dict(_row("zero3_offload_cpu", 6.0, 6.0, repeats=3),
               round_rates=[x * 0.9 for x in slow], measured=50.0)
    runs.with_speed_ratio([base, z3, off])
    p = rounds.paired_ratio(z3, base)
    assert z3["speed_vs_stage0"] == pytest.approx(p["ratio"])          # not 6.4 / 9.0
    assert z3["speed_ci95"] == pytest.approx((p["lo"], p["hi"])) and base["speed_ci95"] is None
    last = findings.speed_findings([base, z3, off])[-1]
    assert last.startswith("stage 3 + CPU offload / stage 3 = 0.900")
    assert "no copy cost is measured here" in last and "DeepSpeedCPUAdam" in last
