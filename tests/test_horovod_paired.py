"""Notebook 03, second expert read: set-ups launched in rounds are compared by a ratio paired
within each round (the round is the unit), and the plots draw the interval the verdict uses."""
from __future__ import annotations

import math

import matplotlib
import pytest

from dltutor.horovod import paired, paired_plots, plots, rounds, runs

matplotlib.use("Agg")
MiB = 2 ** 20


def test_a_paired_ratio_s_interval_is_over_the_rounds_on_a_log_scale():
    r = paired.ratio({1: 1.62, 2: 2.14, 3: 1.75}, {1: 1.0, 2: 1.0, 3: 1.0})
    assert r["n"] == 3 and r["above"] == 3 and r["mean"] == pytest.approx(1.824, abs=1e-3)
    assert (round(r["lo"], 2), round(r["hi"], 2)) == (1.28, 2.61)   # not symmetric: a ratio
    assert paired.decided(r) and paired.text(r) == "1.82x (95 % CI 1.28-2.61, paired by round, 3 rounds)"
    held = paired.ratio({1: 0.61, 2: 0.95, 3: 0.95}, {1: 1.0, 2: 1.0, 3: 1.0})
    assert not paired.decided(held) and paired.rounds_needed(held) == 9
    assert paired.ratio({1: 2.0, 4: 3.0}, {1: 1.0, 2: 1.0})["rounds"] == [1]    # only rounds both ran
    one = paired.ratio({1: 2.0}, {1: 1.0})
    assert math.isnan(one["log_half"]) and not paired.decided(one) and "no interval" in paired.text(one)


def _pools():
    def rows(per_round, **kw):
        return [{"engine": "horovod", "workers": 2, "batch_size": 4, "cycle_time_ms": 50.0,
                 "fusion_threshold_bytes": 32 * MiB, **kw, "total_img_sec": v, "round": k + 1,
                 "iter_totals": [v]} for k, v in enumerate(per_round)]
    launches = {rounds.LAB: rows((10.0, 20.0, 18.0)),
                rounds.DDP: rows((6.0, 11.0, 10.0), engine="ddp"),
                rounds.fusion_name(0): rows((9.0, 21.0, 17.0), fusion_threshold_bytes=0),
                rounds.cycle_name(10): rows((12.0, 21.0, 19.0), cycle_time_ms=10.0)}
    return {k: rounds.pooled(v, k) for k, v in launches.items()}, launches


def _bars(ax):
    """(mean, lo, hi) of each error bar drawn on `ax`."""
    out = []
    for c in ax.containers:
        mean = c.lines[0].get_ydata()[0]
        (seg,) = c.lines[2][0].get_segments()
        out.append((mean, seg[0][1], seg[1][1]))
    return out


def test_the_engine_plot_draws_the_paired_interval_the_finding_uses():
    pools, _ = _pools()
    fig = paired_plots.plot_engines(pools[rounds.LAB], pools[rounds.DDP], "test")
    r = paired.ratio(pools[rounds.LAB]["round_img_sec"], pools[rounds.DDP]["round_img_sec"])
    assert _bars(fig.axes[1]) == [pytest.approx((r["mean"], r["lo"], r["hi"]))]
    assert len(fig.axes[0].lines) == 3                       # one line per round, joining its launches


def test_the_sweep_plot_draws_each_value_over_the_lab_s_in_the_same_round():
    pools, launches = _pools()
    fig = paired_plots.plot_sweeps_by_round(pools, launches, "test")
    want = rounds.sweep_ratios(pools, launches, "cycle_time_ms")[0][1]
    assert _bars(fig.axes[1]) == [pytest.approx((want["mean"], want["lo"], want["hi"]))]
    assert "3 round(s)" in fig.axes[1].get_title() and [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0 (off)"]


def test_the_reference_labels_are_wrapped_so_they_do_not_overprint():
    rows = [{"run": "horovod x1", "workers": 1, "efficiency": 1.0, "engine": "horovod"}]
    ax = plots.plot_rows(rows, "efficiency", "e", "t", reference=runs.V100_REFERENCE)
    assert all(len(line) <= 18 for t in ax.get_xticklabels() for line in t.get_text().split("\n"))


def test_the_timeline_title_says_how_many_tensors_it_shows_and_what_x_starts_from():
    spans = [plots.Span(f"t{i}", "ALLREDUCE", 1000.0 * i, 1000.0 * i + 500, 0) for i in range(30)]
    ax = plots.plot_timeline(spans, "T")
    assert "the last 24 of the trace's 30 tensors to start" in ax.get_title()
    assert "spans that started earlier left out" in ax.get_title()


def test_each_launch_records_the_machine_s_load_as_it_starts(monkeypatch):
    import os

    import dltutor.launch.run as launch_run
    monkeypatch.setattr(os, "getloadavg", lambda: (7.5, 1.0, 1.0))
    monkeypatch.setattr(launch_run, "launch", lambda *a, **k: "result")
    monkeypatch.setattr(runs, "row_from_result", lambda engine, n, result, label: {"run": label})
    assert runs.run_benchmark("ddp", 2, label="x")["load_1m"] == 7.5
