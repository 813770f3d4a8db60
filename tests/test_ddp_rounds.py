"""Notebook 02's interleaved launches (dltutor.ddp.rounds) and warm-up over seeds (warmup_seeds).

Issue #42: two set-ups compared are launched in turns so that a slow minute of the shared machine
hits both; an efficiency is taken within a round; warm-up is judged over >= 3 seeds, never from one.
"""
import math
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from dltutor.core.findings import INCONCLUSIVE
from dltutor.core.spread import mean_ci
from dltutor.ddp import batch_report, findings, rounds, warmup_seeds
from dltutor.ddp.scaling import summarize

NB = Path(__file__).resolve().parents[1] / "course/notebooks/02_ddp_multi_gpu.ipynb"


def _launch(world, b, step_ms, jitter=(0.0, 0.0)):
    """A launch's per-rank metrics with a given mean step time."""
    times = [step_ms + j for j in jitter]
    mean = sum(times) / len(times)
    return SimpleNamespace(metrics=[{
        "world_size": world, "scaling": "weak", "per_rank_batch": b, "global_batch": world * b,
        "global_img_per_s": 1e3 * world * b / mean, "step_time_ms": mean, "step_times_ms": times,
        "hardware": "CPU/gloo", "img_per_s": 1e3 * b / mean} for _ in range(world)])


def test_rounds_rotate_so_no_setup_is_always_first():
    order = rounds.rotations("abc", 4)
    assert order == [list("abc"), list("bca"), list("cab"), list("abc")]
    seen = []
    out = rounds.interleave(["a", "b", "c"], 3, lambda k, r: seen.append((k, r)) or f"{k}{r}")
    assert out == {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"], "c": ["c0", "c1", "c2"]}
    assert [k for k, _ in seen] == list("abc" "bca" "cab")   # A B C, B C A, C A B


# the machine's speed changes from round to round (x1, x2, x0.7, x1.5): it hits every set-up of a round
SLOW = (1.0, 2.0, 0.7, 1.5)


def _scaling_runs(b=16, eff=0.75):
    runs = {}
    for key, ms in {(1, b, 4): 100.0, (1, 2 * b, 4): 180.0, (2, b, 4): 100.0 / eff}.items():
        runs[key] = [_launch(key[0], key[1], ms * f, jitter=(-1.0, 1.0)) for f in SLOW]
    return runs


def test_efficiency_is_taken_within_each_round_so_shared_noise_cancels():
    table = rounds.scaling_rows(_scaling_runs(), summarize, *rounds.weak_and_strong(16))
    weak = next(r for r in table if r["scaling"] == "weak" and r["world_size"] == 2)
    assert weak["rounds"] == 4 and weak["efficiency"] == pytest.approx(0.75)
    assert weak["efficiency_spread"] < 1e-9          # each round's efficiency is the same 0.75
    rates = weak["rates"]
    assert weak["rate_spread"] == pytest.approx(mean_ci(rates)) and weak["rate_spread"] > 100
    strong = next(r for r in table if r["scaling"] == "strong" and r["world_size"] == 2)
    assert strong["efficiency"] == pytest.approx(180.0 / (2 * 100.0 / 0.75))
    text = findings.scaling(table)
    w = next(s for s in text if s.startswith("weak"))
    assert "mean of 4 interleaved rounds" in w and "below the ideal 1.0 beyond its 95 % CI" in w
    assert "above the no-gain line 0.5 beyond its 95 % CI" in w and INCONCLUSIVE not in w


def test_an_efficiency_whose_rounds_disagree_says_how_many_rounds_would_decide():
    runs = _scaling_runs()
    runs[(2, 16, 4)] = [_launch(2, 16, ms * f) for ms, f in zip((100.0, 160.0, 110.0, 150.0), SLOW)]
    table = rounds.scaling_rows(runs, summarize, *rounds.weak_and_strong(16))
    w = next(s for s in findings.scaling(table) if s.startswith("weak"))
    assert INCONCLUSIVE in w and "rounds would decide a gap this size" in w


def test_step_rows_average_over_rounds_with_the_ci_over_rounds():
    runs = {("v", 1): [_launch(2, 16, 100.0 * f) for f in SLOW],
            ("v", 2): [_launch(2, 16, 130.0 * f) for f in SLOW]}
    labels = {("v", 1): "small", ("v", 2): "big"}
    rows = rounds.step_rows(runs, labels, findings.step_row)
    assert [r["label"] for r in rows] == ["small", "big"]
    assert rows[0]["step_time_ms"] == pytest.approx(100.0 * sum(SLOW) / 4)
    assert rows[0]["spread_ms"] == pytest.approx(mean_ci([100.0 * f for f in SLOW]))
    text = findings.buckets(rows)
    assert INCONCLUSIVE in text[0] and "about" in text[0] and "rounds would decide" in text[0]
    assert "4 interleaved rounds" in text[-1]


def test_rounds_needed_grows_as_the_gap_shrinks():
    """Issue #42: the t quantile is taken at the new count (a fixed t with 3 degrees of freedom
    asked for 16 and 64 rounds, several times too many): the smallest n whose interval,
    t(n-1) x sd / sqrt(n) with the sd the 4 rounds gave, is narrower than the gap."""
    from scipy import stats
    sd = 2.0 * 2 / stats.t.ppf(0.975, 3)
    half = lambda n: stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)  # noqa: E731
    for gap in (1.0, 0.5):
        n = rounds.rounds_needed(gap, 2.0, 4)
        assert half(n) < gap <= half(n - 1)
    assert rounds.rounds_needed(1.0, 2.0, 4) == 9 and rounds.rounds_needed(0.5, 2.0, 4) == 27
    assert rounds.rounds_needed(1.0, math.nan, 4) is None


def _seed_rows(batch, diffs, base=0.7):
    rows = []
    for seed, d in enumerate(diffs):
        for policy, acc in (("scaled", base), ("scaled+warmup", base + d / 100)):
            rows.append({"global_batch": batch, "k": 8, "policy": policy, "seed": seed, "test_acc": acc,
                         "peak_lr": 0.04, "warmup_steps": 8, "steps": 32})
    return rows


def test_warmup_verdict_over_seeds_each_way():
    table = warmup_seeds.warmup_table(_seed_rows(512, [5.0, 6.0, 5.5]) + _seed_rows(1024, [-4.0, -5.0, -4.5])
                                      + _seed_rows(256, [8.0, -9.0, 2.0]))
    assert [r["global_batch"] for r in table] == [256, 512, 1024]
    assert table[1]["seeds"] == 3 and table[1]["warmup_minus_none"] == pytest.approx(5.5)
    assert table[1]["spread"] == pytest.approx(mean_ci([5.0, 6.0, 5.5]))
    mixed, helped, hurt = warmup_seeds.warmup_findings(table)
    assert "warm-up helped" in helped and "over 3 seeds" in helped and INCONCLUSIVE not in helped
    assert "warm-up hurt" in hurt
    assert INCONCLUSIVE in mixed and "seeds would decide" in mixed and "+8.0, -9.0, +2.0" in mixed


def test_one_seed_gives_no_warmup_verdict():
    (line,) = warmup_seeds.warmup_findings(warmup_seeds.warmup_table(_seed_rows(1024, [-15.0])))
    assert INCONCLUSIVE in line and "one seed gives no interval" in line


def test_seed_runs_repeat_the_sweeps_settings_with_new_seeds():
    from dltutor.ddp import batch_study as bs
    data, _ = bs.load_study_data(256, 100, quiet=True)
    rows = bs.sweep(data, [32, 64], base_lr=0.01, epochs=1, width=4, echo=None, world_size=2)
    extra = warmup_seeds.seed_runs(data, rows, seeds=(1, 2), echo=None)
    assert [(r["seed"], r["global_batch"], r["policy"]) for r in extra] == [
        (s, 64, p) for s in (1, 2) for p in warmup_seeds.PAIR]
    big = {r["policy"]: r for r in rows if r["global_batch"] == 64}
    for r in extra:
        assert (r["peak_lr"], r["warmup_steps"], r["steps"]) == (
            big[r["policy"]]["peak_lr"], big[r["policy"]]["warmup_steps"], big[r["policy"]]["steps"])
    table = warmup_seeds.warmup_table(rows + extra)
    assert table[0]["seeds"] == 3


def test_notebook_02_full_mode_interleaves_and_runs_three_seeds():
    nb = nbformat.read(NB, 4)
    params = nb.cells[1].source
    assert "ROUNDS = pick(6, 1)" in params and "BUCKET_ROUNDS = pick(4, 1)" in params   # 3 and 4 set-ups
    assert "rounds.balance_note(len(SETUPS), ROUNDS)" in "\n".join(c.source for c in nb.cells)
    assert "STUDY_SEEDS = pick((0, 1, 2), (0,))" in params
    assert len(batch_report.FULL["seeds"]) >= 3
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "rounds.interleave(SETUPS, ROUNDS, rounds.with_load(run, LOADS))" in code
    assert "rounds.interleave(list(variants), BUCKET_ROUNDS, rounds.with_load(run, LOADS))" in code
    assert "warmup_seeds.seed_runs(study_data, study, STUDY_SEEDS[1:])" in code


def test_describe_says_one_seeds_warmup_difference_is_not_a_verdict():
    from dltutor.ddp import batch_reference
    line = next(s for s in batch_report.describe(batch_reference.rows(), fast=False)
                if s.startswith("Warm-up at the largest batch"))
    assert "one seed gives no interval" in line and "not a verdict" in line


def test_reference_says_it_is_one_seed_at_other_sizes():
    from dltutor.ddp import batch_reference
    assert "ONE seed" in batch_reference.SOURCE and "16,384 images" in batch_reference.SOURCE
    assert batch_reference.SIZES["train"] == 16384 and batch_report.FULL["train"] != 16384
    assert batch_reference.rows()[0]["steps_per_epoch"] == 16384 // 32


def test_bucket_variants_are_compared_within_rounds_so_the_machines_pace_cancels():
    """A variant 10 % slower in every round is decided slower paired within rounds, although the
    machine's pace (SLOW) moves every variant's mean far more than 10 % between rounds."""
    ref, small = findings.bucket_label(25), findings.bucket_label(0.05)
    runs = {25: [_launch(2, 16, 100.0 * f) for f in SLOW], 0.05: [_launch(2, 16, 110.0 * f) for f in SLOW]}
    rows = rounds.step_rows(runs, {25: ref, 0.05: small}, findings.step_row)
    text = findings.buckets(rows)
    assert text[0].startswith("Mean step time over 4 rounds") and "the paired line decides" in text[0]
    line = next(s for s in text if s.startswith("Paired within rounds"))
    assert f"{small} 1.10x ± 0.00, slower beyond its 95 % CI" in line
    runs[0.05] = [_launch(2, 16, ms * f) for ms, f in zip((90.0, 115.0, 95.0, 110.0), SLOW)]
    rows = rounds.step_rows(runs, {25: ref, 0.05: small}, findings.step_row)
    line = next(s for s in findings.buckets(rows) if s.startswith("Paired within rounds"))
    assert "inconclusive here" in line and "rounds would decide" in line


def test_step_rows_img_per_s_comes_from_the_same_times_as_the_step_time():
    """Issue #42 (read 2, item 2): a mean of per-round rates disagrees with the mean of per-round
    step times (1,204 ms printed beside 146 img/s for B=128); both now come from the same times."""
    runs = {"v": [_launch(2, 64, ms) for ms in (2000.0, 500.0)]}
    row = rounds.step_rows(runs, {"v": "v"}, findings.step_row)[0]
    assert row["step_time_ms"] == pytest.approx(1250.0)
    assert row["global_img_per_s"] == pytest.approx(1e3 * 128 / 1250.0)      # 102.4, not 160


def test_buckets_are_judged_against_no_overlap_paired_within_rounds():
    """Issue #42 (read 2, items 3 and 7): the verdict's unit is the round, against the no-overlap
    control (the pair that can show an overlap effect); a cap that holds every gradient in one
    bucket is said to be unable to show one; the table carries the verdict's ratio and interval."""
    labels = {25: findings.bucket_label(25), 0.05: findings.bucket_label(0.05),
              "no": "no overlap (all-reduce after backward)"}
    runs = {k: [_launch(2, 16, ms * f) for f in SLOW] for k, ms in ((25, 100.0), (0.05, 80.0), ("no", 100.0))}
    for k, res in runs.items():
        for launch in res:
            for m in launch.metrics:   # 1 M parameters = 3.8 MiB of fp32 gradients
                m.update(params=1_000_000, bucket_cap_mb=25 if k == "no" else k, overlap=k != "no")
    rows = rounds.with_ratios(rounds.step_rows(runs, labels, findings.step_row), labels["no"])
    small = next(r for r in rows if r["label"] == labels[0.05])
    assert small["ratio_to_ref"] == pytest.approx(0.8) and small["ratio_spread"] < 1e-9
    text = findings.buckets(rows)
    line = next(s for s in text if s.startswith("Paired within rounds"))
    assert f"over {labels['no']}'s in the same round" in line
    assert f"{labels[0.05]} 0.80x ± 0.00, faster beyond its 95 % CI" in line
    one = next(s for s in text if "in one bucket" in s)
    assert one.startswith(labels[25] + " holds all 3.8 MiB") and labels[0.05] not in one.split(" holds")[0]


def test_rotation_balance_and_load_are_printed():
    """Issue #42 (read 2, items 4 and 5): 5 rounds of 3 set-ups are unbalanced and said so; every
    launch's 1-minute load before and after is logged and printed."""
    assert "NOT balanced" in rounds.balance_note(3, 5) and "balanced, every" in rounds.balance_note(3, 6)
    log = []
    run = rounds.with_load(lambda k, r: f"{k}{r}", log)
    assert rounds.interleave(["a", "b"], 2, run) == {"a": ["a0", "a1"], "b": ["b0", "b1"]}
    assert [(k, r) for k, r, _, _ in log] == [("a", 0), ("b", 0), ("b", 1), ("a", 1)]
    line = rounds.load_lines(log, 2)
    assert line.startswith("1-minute load average (this machine: 2 cores)") and "round 1 a:" in line


def _study(accs_big, fixed_512=0.589, scaled_512=0.732, curve=None):
    rows = []
    for b, steps in ((64, 512), (512, 64), (1024, 32)):
        for p in ("fixed", "scaled", "scaled+warmup"):
            acc = {64: 0.75, 512: {"fixed": fixed_512, "scaled": scaled_512, "scaled+warmup": 0.714}[p],
                   1024: accs_big[p]}[b]
            rows.append({"global_batch": b, "policy": p, "seed": 0, "test_acc": acc, "train_acc": None,
                         "steps": steps, "steps_per_epoch": steps // 4, "peak_lr": 0.005 * b / 64,
                         "k": b / 64, "epochs_to_target": 4.0, "lr scaled": 0.005 * b / 64, "target": 0.712, "steps_to_target": steps,
                         "steps_run": steps, "loss_curve": (curve if p != "fixed" and b == 1024 and curve
                                                            else [2.3, 2.0, 1.8])})
    return rows


def test_one_seed_does_not_rank_the_large_batch_policies():
    """Issue #42 (read 2, items 1 and 9): seed 0's 26.7 / 24.1 / 25.4 % cannot rank the policies
    when the linear rule's further seeds reach 38.5 and 46.5 %; the divergence above chance, the
    linear rule's gain at B=512 and the one-seed steps to target are said."""
    study = _study({"fixed": 0.267, "scaled": 0.241, "scaled+warmup": 0.255},
                   curve=[2.3, 2.2, 7.4, 3.0, 2.2])
    seeded = [{"global_batch": 1024, "policy": p, "seed": s, "test_acc": a}
              for s, p, a in ((1, "scaled", 0.385), (1, "scaled+warmup", 0.298),
                              (2, "scaled", 0.465), (2, "scaled+warmup", 0.433))]
    text = batch_report.describe(study, fast=False, seeded=seeded)
    said = " ".join(text)
    assert ("At B=1024 one seed cannot rank the policies: linear scaling rule ranged 24.1% to 46.5% over 3 seeds"
            in said) and "no LR scaling was run with one seed only" in said
    assert "Best large-batch policy" not in said and "Highest of seed 0's runs" in said
    assert "Linear scaling rule at B=512: +14.3 points over no LR scaling (58.9% -> 73.2%" in said
    assert "peaked at loss 7.4 at step 3 and ended at 2.20" in said and "ln 10 = 2.30" in said
    assert "these step counts are one draw" in said
    alone = " ".join(batch_report.describe(study, fast=False))
    assert "Best large-batch policy here" in alone and "cannot rank" not in alone


def test_scaling_sentences_say_which_side_of_the_no_gain_line_and_which_mean():
    """Issue #42 (read 2, item 10): 'above the no-gain line ... (2 ranks no faster than 1)' read as a
    contradiction; the sentence now says what 'above' means, and that the efficiency is the mean of
    the per-round ratios, beside the ratio of the mean rates."""
    table = rounds.scaling_rows(_scaling_runs(), summarize, *rounds.weak_and_strong(16))
    weak = next(s for s in findings.scaling(table) if s.startswith("weak"))
    assert "above the no-gain line 0.5 beyond its 95 % CI: 2 ranks were faster than 1" in weak
    assert "(2 ranks no faster than 1)" not in weak
    assert "0.75 is the mean of the per-round ratios, the ratio of the mean rates is 0.750" in weak
    last = findings.scaling(table)[-1]
    assert "differ only in their 1-rank baseline" in last


def test_notebook_02_wires_the_verdicts_interval_the_load_and_its_figures():
    """Issue #42 (read 2): the bucket table shows the paired ratio and its interval, the study's
    sentences get the further seeds, section 4 sets the all-reduce share against the efficiency,
    every plot is saved as PNG, and the markdown no longer says what this design cannot show."""
    nb = nbformat.read(NB, 4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    md = " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    assert "rounds.with_ratios(brows" in code and '"ratio_to_ref", "ratio_spread"' in code
    assert "batch_report.describe(study, seeded=seeded)" in code
    assert "run_findings.contention(weak2, otable)" in code and '"t_exposed_ms"' in code
    assert code.count("path=FIGS /") == 5 and 'figures_dir("02")' in code
    assert "print(rounds.load_lines(LOADS, cpu_cores()))" in code
    assert "look for its efficiency to be the lower of the two" not in md
    assert "the comparison is fair" not in md and "cannot reach the *\">8000\"*" in md
    assert "broadcast_buffers=True" in md and "lr = base_lr × world_size` (plus" not in md


def test_step_time_plot_draws_the_verdicts_ratio_and_labels_past_the_whisker():
    """Issue #42 (read 2, items 3 and 11): with paired ratios the bars are the ratio over the
    reference with its interval over rounds (what the verdict uses), and no label sits on a whisker."""
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.ddp import plots
    rows = [{"label": "a", "step_time_ms": 1200.0, "spread_ms": 1250.0, "ratio_to_ref": 0.75, "ratio_spread": 0.48},
            {"label": "no overlap", "step_time_ms": 1800.0, "spread_ms": 2000.0, "ratio_to_ref": 1.0, "ratio_spread": 0.0}]
    ax = plots.plot_step_times(rows).axes[0]
    assert "over the reference's in the same round" in ax.get_xlabel()
    texts = {t.get_text(): t.get_position()[0] for t in ax.texts}
    assert texts["0.75x"] > 0.75 + 0.48 and texts["1.00x"] > 1.0
