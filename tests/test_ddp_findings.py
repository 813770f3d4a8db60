"""Notebook 02's printed findings: each sentence follows the numbers, each way and inconclusive.

The rows are hand-made in the shape the notebook builds (`scaling.summarize` + `scaling_table`,
`findings.step_row`, `findings.overlap_table`), so a sentence that were hard-coded would fail one
of the cases: A ahead, B ahead, and a gap inside the spread.
"""
import math

import pytest

from dltutor.core.findings import INCONCLUSIVE, half_range
from dltutor.core.spread import mean_ci
from dltutor.ddp import batch_reference, batch_report, findings
from dltutor.ddp.scaling import scaling_table, summarize


def _metrics(world, b, times_ms, hw="CPU/gloo"):
    """Per-rank lab metrics of a launch: global img/s from the mean step time of the ranks."""
    B = world * b
    mean = sum(times_ms) / len(times_ms)
    return [{"world_size": world, "scaling": "weak", "per_rank_batch": b, "global_batch": B,
             "global_img_per_s": 1e3 * B / mean, "step_time_ms": mean, "step_times_ms": times_ms,
             "hardware": hw, "img_per_s": 1e3 * b / mean} for _ in range(world)]


def _table(t1, t2, t1_double):
    rows = []
    for (n, pb), times in {(1, 16): t1, (1, 32): t1_double, (2, 16): t2}.items():
        row = summarize(_metrics(n, pb, times))
        if pb == 16:
            rows.append({**row, "scaling": "weak"})
        if n * pb == 32:
            rows.append({**row, "scaling": "strong"})
    return scaling_table(rows)


def test_summarize_spread_is_the_95_ci_of_the_step_rates():
    """Issue #42: the ± of a rate is the 95 % CI of the mean per-step img/s, not half their range:
    more steps with the same variation shrink it; one step gives no interval (nan), never 0."""
    row = summarize(_metrics(2, 16, [100.0, 200.0]))
    assert row["rate_spread"] == pytest.approx(mean_ci([320.0, 160.0]))
    assert row["rate_spread"] != pytest.approx(half_range([320.0, 160.0]))
    more = summarize(_metrics(2, 16, [100.0, 200.0] * 5))["rate_spread"]
    assert more < row["rate_spread"] / 5
    assert math.isnan(summarize(_metrics(2, 16, [100.0]))["rate_spread"])


def test_one_timed_step_gives_no_interval_and_decides_nothing():
    text = findings.scaling(_table([100], [200], [190]))
    weak = next(s for s in text if s.startswith("weak"))
    assert "efficiency 0.50 ± n/a" in weak and INCONCLUSIVE in weak and "no interval" in weak
    row = findings.step_row("x", _metrics(2, 16, [100.0]))
    assert math.isnan(row["spread_ms"])


def test_scaling_efficiency_below_ideal():
    # 2 ranks take twice as long per step as 1 rank: efficiency 0.5, tight spreads
    text = findings.scaling(_table([100, 101], [200, 201], [190, 191]))
    weak = next(s for s in text if s.startswith("weak"))
    assert "efficiency 0.50" in weak and "below the ideal 1.0 beyond its 95 % CI" in weak
    assert "2 ranks ran at 1.00x the throughput of 1 (ideal: 2x)" in weak
    assert f"{INCONCLUSIVE} against the no-gain line 0.5" in weak   # 0.50 is the no-gain line itself


def test_scaling_efficiency_near_ideal():
    # same step time on 2 ranks as on 1: efficiency 1.0, inside the spread
    text = findings.scaling(_table([100, 101], [100, 101], [200, 201]))
    weak = next(s for s in text if s.startswith("weak"))
    assert "efficiency 1.00" in weak and INCONCLUSIVE in weak


def test_scaling_efficiency_inconclusive_with_noisy_steps():
    text = findings.scaling(_table([60, 140], [100, 300], [150, 250]))
    weak = next(s for s in text if s.startswith("weak"))
    assert "efficiency 0.50" in weak and INCONCLUSIVE in weak


def test_scaling_strong_against_weak_goes_each_way():
    # strong below weak: 2 ranks with b=16 step like 1 rank with b=32
    low = findings.scaling(_table([100, 101], [150, 151], [100, 101]))[-1]
    assert low.startswith("strong-scaling efficiency 0.33") and "is 0.50x weak" in low
    high = findings.scaling(_table([100, 101], [150, 151], [400, 401]))[-1]
    assert high.startswith("strong-scaling efficiency 1.33") and "is 1.99x weak" in high


def _brows(default, tiny, noov):
    return [{"label": lab, "step_time_ms": t, "spread_ms": s, "timed_steps": 4,
             "global_img_per_s": 1.0, "hardware": "CPU/gloo"}
            for lab, (t, s) in ((findings.bucket_label(25), default), (findings.bucket_label(0.05), tiny),
                                ("no overlap (all-reduce after backward)", noov))]


def test_buckets_no_overlap_faster():
    text = findings.buckets(_brows((120, 2), (130, 2), (100, 2)))
    assert text[0].startswith("fastest step here: no overlap")
    assert "no overlap was faster" in text[1] and INCONCLUSIVE not in text[1]


def test_buckets_overlap_faster():
    text = findings.buckets(_brows((100, 2), (130, 2), (120, 2)))
    assert text[0].startswith("fastest step here: bucket_cap_mb=25 (MiB)")
    assert "Overlap paid off" in text[1]


def test_buckets_say_the_labs_25_mib_is_not_ddps_default():
    """Issue #42: the lab passes bucket_cap_mb=25 (every bucket 25 MiB); DDP's None keeps a 1 MiB
    first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES). Units are MiB, not MB."""
    import torch.distributed as dist
    note = findings.buckets(_brows((100, 2), (130, 2), (120, 2)))[-1]
    first = dist._DEFAULT_FIRST_BUCKET_BYTES / 2 ** 20
    assert "not DDP's default" in note and "passes bucket_cap_mb=25 explicitly" in note
    assert f"first bucket at {first:g} MiB" in note and "the first too" in note
    assert " MB" not in " ".join(findings.buckets(_brows((100, 2), (130, 2), (120, 2))))
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/02_ddp_multi_gpu.ipynb", 4)
    text = " ".join(" ".join(c.source.split()) for c in nb.cells)
    assert "(and DDP's) default" not in text and "25 MB" not in text and "megabytes" not in text
    assert "run_findings.bucket_label(mb)" in text and "it is not DDP's default" in text


def test_buckets_inconclusive():
    text = findings.buckets(_brows((100, 15), (103, 15), (104, 15)))
    assert text[0].startswith("no variant stepped fastest") and INCONCLUSIVE in text[0]
    assert INCONCLUSIVE in text[1]
    assert "paid off" not in text[1] and "was faster" not in text[1]


def test_step_row_uses_the_slowest_rank():
    ms = _metrics(2, 16, [100.0, 110.0])
    ms[1] = {**ms[1], "step_times_ms": [200.0, 240.0]}
    row = findings.step_row("x", ms)
    assert row["step_time_ms"] == 220.0 and row["timed_steps"] == 2
    assert row["spread_ms"] == pytest.approx(mean_ci([200.0, 240.0])) == pytest.approx(254.1, abs=0.1)


def _orows(label, fractions, comm=10.0):
    return [{"label": label, "rank": i % 2, "step": i // 2, "t_iter_ms": 100.0, "t_forward_ms": 30.0,
             "t_backward_ms": 50.0, "t_comm_ms": comm, "t_overlap_ms": f * comm,
             "t_other_ms": 100.0 - (80 + comm - f * comm), "overlap_fraction": f, "buckets": 2}
            for i, f in enumerate(fractions)]


def test_overlap_table_means_and_spread():
    t = findings.overlap_table(_orows("a", [0.2, 0.4, 0.6]) + _orows("b", [0.0, 0.0]))
    a, b = t
    assert a["overlap_fraction"] == pytest.approx(0.4) and a["fraction_spread"] == pytest.approx(mean_ci([0.2, 0.4, 0.6]))
    assert a["samples"] == 3 and b["overlap_fraction"] == 0.0


def test_overlap_sentences_each_way():
    """Issue #42: the overlap fraction is concurrency (waiting for the peer included), not time
    saved: the comparison is of the exposed communication T_comm - T_overlap, and the sentences say
    the timeline is one launch."""
    small_wins = findings.overlap(findings.overlap_table(
        _orows("tiny buckets", [0.8, 0.85, 0.9], 20.0) + _orows("default", [0.1, 0.15, 0.2], 20.0)
        + _orows("no overlap", [0, 0], 20.0)))
    assert "one launch per variant" in small_wins[0]
    assert "tiny buckets 3 ± " in small_wins[1] and "default 17 ± " in small_wins[1]   # 20 x (1 - f)
    assert small_wins[2].startswith("tiny buckets exposed less communication than default (3 vs 17 ms)")
    assert "hid a larger share" not in " ".join(small_wins)
    assert "tiny buckets 0.85" in next(s for s in small_wins if s.startswith("overlap fraction"))
    assert "concurrency, not time saved" in " ".join(small_wins)
    tie = findings.overlap(findings.overlap_table(
        _orows("tiny buckets", [0.2, 0.8]) + _orows("default", [0.3, 0.7]) + _orows("no overlap", [0, 0])))
    assert INCONCLUSIVE in tie[2]
    assert "0 as it must be" in tie[-2] and "90%" in tie[-1]


def test_contention_sets_the_all_reduce_share_against_the_efficiency_lost():
    """Issue #42: a 0.54 efficiency with an all-reduce of ~4 % of the step is contention, and the
    sentence says so from the numbers."""
    t = findings.overlap_table(_orows("no overlap", [0, 0], 20.0))
    line = findings.contention({"efficiency": 0.54}, t)
    assert "loses 46% of the ideal" in line and "20 ms of a 100 ms step (20%" in line
    assert "contention" in line
    assert "large part" in findings.contention({"efficiency": 0.85}, t)


def test_overlap_control_flags_overlap_under_no_sync():
    text = findings.overlap(findings.overlap_table(_orows("default", [0.5]) + _orows("no overlap", [0.4])))
    assert "should prevent" in text[-2]


def test_reference_is_labelled_and_printed_by_describe():
    rows = batch_reference.rows()
    assert {r["global_batch"] for r in rows} == set(batch_reference.TABLE)
    text = batch_reference.findings()
    said = batch_report.describe(rows, fast=False)
    assert text[:len(said)] == said and len(text) == len(said) + 2
    assert not any("FAST MODE" in s for s in text)
    assert any("-14.9 points over the linear rule" in s for s in text)
    assert "B=1024 a bigger batch no longer saves steps" in " ".join(text)
    assert "+7.7 points as on 1 rank" in text[-1] and "opposite signs" in text[-1]
    assert "0.18 at B=1024" in text[-2]


def test_describe_fast_flag_adds_the_caveat_only_when_asked():
    rows = batch_reference.rows()
    assert batch_report.describe(rows, fast=True)[0].startswith("FAST MODE")
    assert not batch_report.describe(rows, fast=False)[0].startswith("FAST MODE")


def _pair(loss_ranks, acc_ranks, steps=16, curves=None):
    one = {"run": "one process (the sweep)", "global_batch": 256, "steps": 16, "final_loss": 1.2345,
           "test_acc": 0.5, "steps_to_target": None, "lr": 0.04}
    a, b = curves or (None, None)
    return [{**one, "loss_curve": a}, {**one, "run": "lab 02 on 2 ranks (CPU/gloo)", "final_loss": loss_ranks,
                                       "test_acc": acc_ranks, "steps": steps, "loss_curve": b}]


def test_lab_agreement_each_way():
    agree = findings.lab_agreement(_pair(1.2346, 0.5))
    assert agree[0].startswith("No per-step loss curves") and len(agree) == 3
    assert "they agree" in agree[1] and "they agree" in agree[2]
    apart = findings.lab_agreement(_pair(1.5, 0.45))
    assert "above it by 0.266" in apart[1] and "below it by 0.05" in apart[2]
    other = findings.lab_agreement(_pair(1.2345, 0.5, steps=8))
    assert other[-1].startswith("not the same run")


def test_lab_agreement_gives_a_verdict_on_the_first_steps():
    """Issue #42: the two runs are compared where they must agree, the first steps, with agree /
    differ and the tolerance; the end of an unstable run is reported as split, not as the verdict."""
    one = [2.3 - 0.01 * i for i in range(16)]
    same = [x + 1e-6 for x in one]
    split = same[:12] + [x + 0.5 for x in one[12:]]
    agree = findings.lab_agreement(_pair(1.2346, 0.5, curves=(one, same)))
    assert "first 10 steps" in agree[0] and "they AGREE" in agree[0] and "±0.0002" in agree[0]
    assert "stay within ±0.0002 for all 16 steps" in agree[1]
    later = findings.lab_agreement(_pair(1.7, 0.3, curves=(one, split)))
    assert "they AGREE" in later[0] and "part at step 13 of 16 (0.5 apart)" in later[1]
    assert "no test of the lab" in later[1] and later[2].startswith("At the end of the budget:")
    wrong = findings.lab_agreement(_pair(1.7, 0.3, curves=(one, [x + 0.01 for x in one])))
    assert "they DIFFER: at step 1 the losses are 0.01 apart" in wrong[0] and "AGREE" not in " ".join(wrong)
    nan = findings.lab_agreement(_pair(1.7, 0.3, curves=(one, one[:3] + [float("nan")] * 13)))
    assert "they DIFFER: at step 4" in nan[0]


def _gap_rows(train_small, train_big):
    rows = batch_reference.rows()
    for r in rows:
        r["train_acc"] = train_small if r["global_batch"] == 32 else train_big
    return rows


def test_describe_tells_under_training_from_a_generalization_gap():
    """Issue #42: a test gap at equal epochs is not called a generalization gap; the training
    accuracy decides (and without it the sentence says it cannot)."""
    bare = batch_report.describe(batch_reference.rows(), fast=False)
    assert "generalization gap)." not in " ".join(bare)
    assert "test-accuracy gap at the same epochs, after 64 steps against 2048" in bare[1]
    assert bare[2].startswith("No training accuracy in these rows") and "Hoffer" in bare[2]
    under = batch_report.describe(_gap_rows(0.90, 0.70), fast=False)[2]   # test 83.9 -> 68.8
    assert under.startswith("Training accuracy at the end of the budget: 90.0% at B=32, 70.0% at B=1024")
    assert "-20.0 points" in under and "-15.1 points on the test" in under and "under-training" in under
    general = batch_report.describe(_gap_rows(0.90, 0.89), fast=False)[2]
    assert "a generalization gap." in general and "under-training" not in general


def test_notebook_02_and_its_plots_say_the_pm_is_a_95_ci():
    """Issue #42: notebook 02 prints what ± is where its first ± column appears, calls it nowhere a
    half range, and its compared rates and step times are drawn as mean ± 95 % CI error bars."""
    from pathlib import Path

    import matplotlib
    import nbformat
    matplotlib.use("Agg")
    from matplotlib.container import ErrorbarContainer

    from dltutor.ddp import plots
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/02_ddp_multi_gpu.ipynb", 4)
    srcs = [c.source for c in nb.cells]
    first = next(i for i, s in enumerate(srcs) if "rate_spread" in s or "±" in s)
    assert "print(rounds.ROUNDS_NOTE if ROUNDS > 1 else SPREAD_NOTE)" in srcs[first]
    text = " ".join(" ".join(s.split()) for s in srcs)
    assert "half the min-max" not in text and "half range" not in text
    table = _table([100, 110, 105], [200, 220, 210], [190, 200, 195])
    fig = plots.plot_scaling(table)
    ax_p, ax_e = fig.axes[:2]
    assert any(isinstance(c, ErrorbarContainer) for c in ax_p.containers) and "95 % CI" in ax_p.get_ylabel()
    assert any(isinstance(c, ErrorbarContainer) for c in ax_e.containers)
    steps = plots.plot_step_times(_brows((100, 2), (130, math.nan), (120, 2)))
    assert "95 % CI" in steps.axes[0].get_xlabel()       # a run without an interval draws no bar
