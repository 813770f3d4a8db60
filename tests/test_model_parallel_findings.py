"""Notebook 06's printed findings (dltutor.model_parallel.findings) and the honesty of its tables:
every sentence follows the numbers each way (one side wins, the other, inside the spread), and
every row/bar says whether it was measured, derived or only computed from a formula."""
from __future__ import annotations

import pytest

from dltutor.core.findings import INCONCLUSIVE
from dltutor.model_parallel import findings as F
from dltutor.model_parallel import runs
from dltutor.model_parallel.pipeline import bubble_formula


def _bubble_rows(measured, spread=0.0, p=2, sched="gpipe", held=None):
    ms = [1, 2, 4, 8][:len(measured)]
    held = held or ms
    return [{"stages": p, "schedule": sched, "m": m, "measured": b, "spread": spread,
             "formula": bubble_formula(p, m), "max in flight": h} for m, b, h in zip(ms, measured, held)]


def test_bubble_that_falls_and_sits_above_more_so_as_m_grows():
    # formula p=2: 0.5, 0.333, 0.2, 0.111; gaps 0.05, 0.07, 0.1, 0.179 grow
    text = " ".join(F.bubble(_bubble_rows([0.55, 0.403, 0.3, 0.29])))
    assert "gpipe measured bubble (p=2) falls as m grows" in text
    assert "gap to the formula (p-1)/(m+p-1) (measured - formula, p=2) rises as m grows" in text
    assert "bubble at m=8 (p=2): 0.29 measured vs 0.111 from the formula" in text and "above it by 0.179" in text


def test_bubble_that_rises_and_sits_below_is_said_so():
    text = " ".join(F.bubble(_bubble_rows([0.1, 0.15, 0.18, 0.2])))
    assert "measured bubble (p=2) rises as m grows" in text
    assert "below it by" not in text and "above it by 0.0889" in text   # 0.2 vs 0.111 at m=8
    text = " ".join(F.bubble(_bubble_rows([0.5, 0.3, 0.15, 0.05])))
    assert "falls as m grows" in text and "below it by 0.0611" in text


def test_bubble_inside_the_spread_is_inconclusive_and_agrees():
    text = " ".join(F.bubble(_bubble_rows([0.30, 0.31, 0.29, 0.12], spread=0.2)))
    assert f"gpipe measured bubble (p=2) does not change beyond the run's spread as m grows ({INCONCLUSIVE})" in text
    assert "within ±0.2, they agree" in text


def test_in_flight_gpipe_holds_m_1f1b_at_most_p():
    rows = _bubble_rows([0.5, 0.3, 0.2, 0.1]) + _bubble_rows([0.5, 0.3, 0.2, 0.1], sched="1f1b",
                                                             held=[1, 2, 2, 2])
    line = F.in_flight(rows)[0]
    assert "gpipe held 1 at m=1, 2 at m=2, 4 at m=4, 8 at m=8 (= m in every run)" in line
    assert "1f1b held 1 at m=1, 2 at m=2, 2 at m=4, 2 at m=8 (= min(m, p) in every run)" in line
    assert "At m=8, 1F1B held 4x fewer activations than GPipe." in line


def test_in_flight_says_when_1f1b_held_as_many_as_gpipe():
    rows = _bubble_rows([0.5, 0.3]) + _bubble_rows([0.5, 0.3], sched="1f1b", held=[1, 2])
    line = F.in_flight(rows)[0]
    assert "no fewer than GPipe (2 vs 2)" in line
    rows = _bubble_rows([0.5, 0.3], held=[1, 1]) + _bubble_rows([0.5, 0.3], sched="1f1b", held=[1, 3])
    line = F.in_flight(rows)[0]
    assert "gpipe held 1 at m=1, 1 at m=2 (not always m)" in line and "(not always min(m, p))" in line


def _tp_row(err=1e-7, ours="1/1", torch_="1/1", bytes_each=4096, formula=4096):
    return {"ranks": 2, "block": "attention", "out err": err, "grad err": err / 2, "DTensor err": 0.0,
            "ours vs DTensor": 0.0, "all-reduces fwd/bwd": ours, "DTensor fwd/bwd": torch_,
            "bytes each": bytes_each, "formula bytes": formula, "params/rank": 50, "params whole": 100,
            "ms whole": 1.0, "ms split": 3.0}


def test_tp_findings_follow_the_errors_and_counts():
    good = F.tp([_tp_row(torch_="1/3")])
    assert "below the fp32 tolerance 1e-05" in good[0]
    assert "made 1/1 all-reduces (fwd/bwd), one per direction" in good[1]
    assert "DTensor plan made 1/3, a different count" in good[1] and ", equal to tokens" in good[1]
    assert "no verdict on speed" in good[2]
    bad = F.tp([_tp_row(err=1e-3, ours="2/1", bytes_each=8192)])
    assert "ABOVE the fp32 tolerance" in bad[0]
    assert "NOT one per direction" in bad[1] and "the same count" not in bad[1] and "NOT equal to" in bad[1]


def test_summary_has_tp_bubble_and_memory_lines():
    rows = _bubble_rows([0.55, 0.4]) + _bubble_rows([0.55, 0.4], sched="1f1b", held=[1, 2])
    out = F.findings([_tp_row()], rows)
    assert len(out) == 3 and "fp32 tolerance" in out[0] and "gpipe measured bubble" in out[1]
    assert "Most micro-batches" in out[2]


# ---------------------------------------------------------------- labelled rows and bars
TP_REPORT = {"world_size": 2, "hardware": "CPU (gloo)", "blocks": [
    {"block": "mlp", "bytes_forward": 1024, "bytes_backward": 1024, "params_full": 1000,
     "params_per_rank": 500, "allreduce_forward": 1, "allreduce_backward": 1, "ms_split": 2.0,
     "ms_whole": 1.0}]}
PP_REPORT = {"world_size": 2, "mb_size": 4, "d_model": 8, "work": "SLEEP stand-in 10 ms", "runs": [
    {"schedule": "gpipe", "m": m, "bubble": b, "bubbles": [b - 0.01, b + 0.03], "formula": bubble_formula(2, m),
     "stages": 2, "step_s": 0.1, "in_flight": [m, 1]} for m, b in ((1, 0.5), (4, 0.25))]}


def test_bubble_rows_carry_the_spread_of_the_steps():
    rows = runs.bubble_rows(PP_REPORT)
    assert [r["spread"] for r in rows] == pytest.approx([0.02, 0.02])


def test_every_bytes_row_and_strategy_row_says_its_kind():
    kinds = {r["form"]: r["kind"] for r in runs.measured_bytes(TP_REPORT, PP_REPORT)}
    assert kinds == {"tensor (TP)": "counted", "pipeline (PP)": "derived from shapes",
                     "data (DP)": "formula only (not run)"}
    table = {r["strategy"]: r for r in runs.strategy_table(TP_REPORT, PP_REPORT)}
    assert table["data"]["kind"] == "not run here"
    assert table["model (pipeline)"]["kind"].startswith("measured") and "SLEEP" in table["model (pipeline)"]["kind"]
    assert table["tensor"]["when to use"] == "When even one layer is too large for one device."  # seed 003's words
    assert "adapted from seed 003" in runs.ADAPTED and "dropped" in runs.ADAPTED


def test_bytes_plot_hatches_each_bar_by_kind():
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.model_parallel import plots
    rows = runs.measured_bytes(TP_REPORT, PP_REPORT)
    fig = plots.plot_bytes({r["form"]: r["bytes per step"] for r in rows}, "t",
                           kinds={r["form"]: r["kind"] for r in rows})
    ax = fig.axes[0]
    assert [b.get_hatch() or "" for b in ax.patches[:3]] == ["", "//", "xx"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [r["kind"] for r in rows]
