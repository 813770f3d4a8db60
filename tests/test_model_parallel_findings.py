"""Notebook 06's printed findings (dltutor.model_parallel.findings) and the honesty of its tables:
every sentence follows the numbers each way (one side wins, the other, inside the spread), and
every row/bar says whether it was measured, derived or only computed from a formula."""
from __future__ import annotations

import math

import pytest

from dltutor.core import spread
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
    assert ("gpipe measured bubble (p=2): this run cannot tell whether it changes as m grows (every step "
            f"inside the run's spread: {INCONCLUSIVE})") in text
    assert "bubble at m=8 (p=2): 0.12 measured vs 0.111" in text and "tolerance (±0.2) is as large" in text
    assert "within ±0.02, they agree" in " ".join(F.bubble(_bubble_rows([0.5, 0.34, 0.21, 0.12], spread=0.01)))


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


def _tp_row(err=1e-7, ours="1/1", torch_="1/1", bytes_each=4096, formula=4096, split=(3.0, 0.5),
            whole=(1.0, 0.5)):
    """A TP table row; split and whole are (mean ms, ± 95 % CI)."""
    return {"ranks": 2, "block": "attention", "out err": err, "grad err": err / 2, "DTensor err": 0.0,
            "ours vs DTensor": 0.0, "all-reduces fwd/bwd": ours, "DTensor fwd/bwd": torch_,
            "bytes each": bytes_each, "formula bytes": formula, "params/rank": 50, "params whole": 100,
            "ms whole": whole[0], "ms split": split[0], "± whole": whole[1],
            "± split": split[1], "runs": 10}


def test_tp_findings_follow_the_errors_and_counts():
    good = F.tp([_tp_row(torch_="1/3")])
    assert "below the fp32 tolerance 1e-05" in good[0]
    assert "made 1/1 all-reduces (fwd/bwd), one per direction" in good[1]
    assert "DTensor plan made 1/3, a different count" in good[1] and ", equal to tokens" in good[1]
    assert good[2] == ("attention on 2 ranks, mean of 10 alternated runs each: split 3 ms vs whole 1 ms: "
                       "split is 3.00x whole (the gap, 2 ms, is larger than their 95 % intervals, ±0.5 and ±0.5, combined: ±0.707).")
    assert good[3].startswith("Wherever decided, the split was slower")
    bad = F.tp([_tp_row(err=1e-3, ours="2/1", bytes_each=8192)])
    assert "ABOVE the fp32 tolerance" in bad[0]
    assert "NOT one per direction" in bad[1] and "the same count" not in bad[1] and "NOT equal to" in bad[1]


def test_summary_has_tp_bubble_and_memory_lines():
    rows = _bubble_rows([0.55, 0.4]) + _bubble_rows([0.55, 0.4], sched="1f1b", held=[1, 2])
    out = F.findings([_tp_row()], rows)
    assert len(out) == 4 and "fp32 tolerance" in out[0] and "gpipe measured bubble" in out[1]
    assert out[2].startswith("1F1B vs GPipe bubble, p=2") and "Most micro-batches" in out[3]


# ---------------------------------------------------------------- labelled rows and bars
TP_REPORT = {"world_size": 2, "hardware": "CPU (gloo)", "batch": 2, "seq": 4, "d_model": 8, "blocks": [
    {"block": "mlp", "bytes_forward": 1024, "bytes_backward": 1024, "params_full": 1000,
     "params_per_rank": 500, "allreduce_forward": 1, "allreduce_backward": 1, "ms_split": 2.0,
     "ms_whole": 1.0}]}
PP_REPORT = {"world_size": 2, "mb_size": 4, "d_model": 8, "work": "SLEEP stand-in 10 ms", "runs": [
    {"schedule": "gpipe", "m": m, "bubble": b, "bubbles": [b - 0.01, b + 0.03], "formula": bubble_formula(2, m),
     "stages": 2, "step_s": 0.1, "in_flight": [m, 1]} for m, b in ((1, 0.5), (4, 0.25))]}


def test_bubble_rows_carry_the_ci_of_the_mean_over_the_steps():
    rows = runs.bubble_rows(PP_REPORT)
    assert [r["measured"] for r in rows] == pytest.approx([0.51, 0.26])        # the mean of the steps
    assert [r["spread"] for r in rows] == pytest.approx([spread.mean_ci([0.0, 0.04])] * 2)   # not 0.02


def test_more_steps_shrink_the_bubble_spread_and_one_step_decides_nothing():
    def rows(bubbles):
        return runs.bubble_rows({"runs": [{"schedule": "gpipe", "m": 4, "bubble": 0.3, "bubbles": bubbles,
                                           "formula": bubble_formula(2, 4), "stages": 2, "step_s": 0.1,
                                           "in_flight": [4, 1]}]})
    few, many = rows([0.28, 0.32] * 2), rows([0.28, 0.32] * 10)
    assert many[0]["spread"] < few[0]["spread"] and many[0]["spread"] < 0.02   # half range stays 0.02
    one = rows([0.3])
    assert math.isnan(one[0]["spread"])
    assert F.bubble(one)[-1].endswith(f"{INCONCLUSIVE}, one timed step gives no interval.")


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


# ---------------------------------------------------------------- issue 42: what the run showed
def test_tp_timings_compare_means_of_n_runs_and_decide_only_beyond_their_intervals():
    faster = F.timings([_tp_row(split=(72.5, 5.0), whole=(139.0, 8.0))])
    assert "mean of 10 alternated runs each" in faster[0] and "fastest" not in " ".join(faster)
    assert "split is 0.52x whole" in faster[0]
    assert faster[1].startswith("Wherever decided, the split was faster") and "did not dominate" in faster[1]
    assert "latency" not in " ".join(faster)
    overlap = F.timings([_tp_row(split=(72.5, 50.0), whole=(139.0, 50.0))])
    assert INCONCLUSIVE in overlap[0] and len(overlap) == 1
    one = F.timings([_tp_row(split=(72.5, float("nan")), whole=(139.0, float("nan")))])
    assert "no interval" in one[0] and len(one) == 1          # one run each: nothing decided


def test_tp_rows_give_the_mean_and_ci_of_the_lab_runs():
    block = dict(TP_REPORT["blocks"][0], out_err=0.0, grad_err=0.0, dtensor_out_err=0.0, dtensor_grad_err=0.0,
                 scratch_vs_dtensor_err=0.0, dtensor_collectives={"forward": 1, "backward": 1},
                 formula_bytes=1024, ms_whole_runs=[1.0, 4.0, 2.0], ms_split_runs=[2.0, 3.0], timed_runs=3)
    row = runs.tp_rows({"world_size": 2, "blocks": [block]})[0]
    assert (row["ms whole"], row["ms split"], row["runs"]) == pytest.approx((7 / 3, 2.5, 3))
    assert row["± whole"] == pytest.approx(spread.mean_ci([1.0, 4.0, 2.0]))     # not half of 1..4
    assert row["± split"] == pytest.approx(spread.mean_ci([2.0, 3.0]))


def test_lab_alternates_whole_and_split_runs():
    import importlib.util
    import torch
    from dltutor.core.course import lab
    spec = importlib.util.spec_from_file_location("tp_mlp_lab", lab("06_model_parallel/tp_mlp.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    order = []

    class Block(torch.nn.Linear):
        def __init__(self, name):
            super().__init__(2, 2)
            self.name = name

        def forward(self, x):
            order.append(self.name)
            return super().forward(x)

    times = mod.timed_ms([Block("w"), Block("s")], torch.ones(1, 2), 3, torch.device("cpu"))
    assert order == ["w", "s"] * 4 and [len(t) for t in times] == [3, 3]   # one warm-up pair, untimed


def _sched_rows(gpipe, f1b, spread, p=4):
    ms = [4, 8, 16]
    return ([{"stages": p, "schedule": "gpipe", "m": m, "measured": b, "spread": spread,
              "formula": bubble_formula(p, m), "max in flight": m} for m, b in zip(ms, gpipe)]
            + [{"stages": p, "schedule": "1f1b", "m": m, "measured": b, "spread": spread,
                "formula": bubble_formula(p, m), "max in flight": p} for m, b in zip(ms, f1b)])


def test_schedules_say_when_1f1b_beats_gpipe_beyond_the_spreads():
    line = F.schedules(_sched_rows([0.46, 0.32, 0.21], [0.45, 0.28, 0.17], spread=0.01))[0]
    assert line.startswith("1F1B vs GPipe bubble, p=4 (0.45 vs 0.46 at m=4, 0.28 vs 0.32 at m=8")
    assert line.endswith("1F1B lower beyond the spreads at m=8, m=16.")
    same = F.schedules(_sched_rows([0.46, 0.32, 0.21], [0.45, 0.31, 0.2], spread=0.02))[0]
    assert same.endswith(f"no gap beyond the spreads ({INCONCLUSIVE}).")
    worse = F.schedules(_sched_rows([0.46, 0.32, 0.21], [0.46, 0.40, 0.21], spread=0.01))[0]
    assert worse.endswith("1F1B higher beyond the spreads at m=8.")


def test_real_compute_run_gets_findings_and_the_no_overlap_line():
    rows = _bubble_rows([0.53, 0.55, 0.53, 0.51], spread=0.03)
    out = F.real_compute(rows)
    assert "gpipe measured bubble (p=2)" in out[0]
    assert out[-1] == ("gpipe bubble with real compute at m=8 (p=2): 0.51 measured vs 0.5 from 1 - 1/p, the "
                       "bubble of stages that never work at the same time: within ±0.03, they agree.")
    low = F.real_compute(_bubble_rows([0.5, 0.33, 0.2, 0.12], spread=0.01))[-1]
    assert "below it by 0.38" in low


def test_bytes_rows_compare_forms_on_one_model():
    tp = dict(TP_REPORT, batch=2, seq=8, d_model=16)     # the lab reports its sizes
    rows = {r["form"]: r for r in runs.measured_bytes(tp, PP_REPORT)}
    act = 2 * 8 * 16 * 4                                    # the TP blocks' activation, not the PP lab's
    assert rows["pipeline (PP)"]["bytes per step"] == 2 * act
    assert rows["data (DP)"]["bytes per step"] == 1000 * 4
    assert rows["tensor (TP)"]["bytes per step"] == 2048
    note = runs.pipeline_lab_bytes(PP_REPORT)
    assert "2 x 4 x 4 x 8 x 4 B = 1,024 B" in note and "not comparable" in note
