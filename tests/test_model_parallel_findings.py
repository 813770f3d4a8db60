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
    assert "gpipe measured bubble (p=2): 0.55 at m=1, 0.403 at m=2, 0.3 at m=4, 0.29 at m=8; larger at m=1 than at m=8" in text
    assert "every step between them goes that way" in text
    assert "gap to the formula (p-1)/(m+p-1) (measured - formula, p=2): 0.05 at m=1" in text
    assert "smaller at m=1 than at m=8, beyond the intervals" in text
    assert "bubble at m=8 (p=2): 0.29 measured vs 0.111 from the formula" in text and "above it by 0.179" in text


def test_bubble_that_rises_and_sits_below_is_said_so():
    text = " ".join(F.bubble(_bubble_rows([0.1, 0.15, 0.18, 0.2])))
    assert "smaller at m=1 than at m=8" in text.split("gap to")[0]
    assert "below it by" not in text and "above it by 0.0889" in text   # 0.2 vs 0.111 at m=8
    text = " ".join(F.bubble(_bubble_rows([0.5, 0.3, 0.15, 0.05])))
    assert "larger at m=1 than at m=8" in text and "below it by 0.0611" in text


def test_bubble_inside_the_spread_is_inconclusive_and_agrees():
    text = " ".join(F.bubble(_bubble_rows([0.30, 0.31, 0.29, 0.12], spread=0.2)))
    assert (f"gpipe measured bubble (p=2): 0.3 at m=1, 0.31 at m=2, 0.29 at m=4, 0.12 at m=8; m=1 vs m=8: "
            f"{INCONCLUSIVE}, the gap (0.18) is inside their intervals combined (±0.283)") in text
    assert "bubble at m=8 (p=2): 0.12 measured vs 0.111" in text and "tolerance (±0.2) is as large" in text
    assert "within ±0.02, they agree" in " ".join(F.bubble(_bubble_rows([0.5, 0.34, 0.21, 0.12], spread=0.01)))


def test_in_flight_gpipe_holds_m_1f1b_at_most_p():
    rows = _bubble_rows([0.5, 0.3, 0.2, 0.1]) + _bubble_rows([0.5, 0.3, 0.2, 0.1], sched="1f1b",
                                                             held=[1, 2, 2, 2])
    line = F.in_flight(rows)[0]
    assert "gpipe held 1 at m=1, 2 at m=2, 4 at m=4, 8 at m=8 (= m in every run)" in line
    assert "1f1b held 1 at m=1, 2 at m=2, 2 at m=4, 2 at m=8 (= min(m, p) in every run)" in line
    assert ("At m=8, 1F1B held 4x fewer micro-batches' activations at once than GPipe (memory itself "
            "not measured).") in line
    assert "counted from the schedule's events" in line


def test_in_flight_says_when_1f1b_held_as_many_as_gpipe():
    rows = _bubble_rows([0.5, 0.3]) + _bubble_rows([0.5, 0.3], sched="1f1b", held=[1, 2])
    line = F.in_flight(rows)[0]
    assert "no fewer than GPipe (2 vs 2)" in line
    rows = _bubble_rows([0.5, 0.3], held=[1, 1]) + _bubble_rows([0.5, 0.3], sched="1f1b", held=[1, 3])
    line = F.in_flight(rows)[0]
    assert "gpipe held 1 at m=1, 1 at m=2 (not always m)" in line and "(not always min(m, p))" in line


def _tp_row(err=1e-7, ours="1/1", torch_="1/1", bytes_each=4096, formula=4096, split=(3.0, 0.5),
            whole=(1.0, 0.5), paired=(2.0, 0.3), cores=2, ranks=2):
    """A TP table row; split and whole are (mean ms, ± 95 % CI), paired (mean split - whole, ±)."""
    return {"ranks": ranks, "block": "attention", "out err": err, "grad err": err / 2, "DTensor err": 0.0,
            "ours vs DTensor": 0.0, "all-reduces fwd/bwd": ours, "DTensor fwd/bwd": torch_,
            "bytes each": bytes_each, "formula bytes": formula, "params/rank": 50, "params whole": 100,
            "ms whole": whole[0], "ms split": split[0], "± whole": whole[1],
            "± split": split[1], "runs": 10, "split - whole": paired[0], "± paired": paired[1],
            "whole threads": min(ranks, cores), "cores": cores, "dx err": err}


def test_tp_findings_follow_the_errors_and_counts():
    good = F.tp([_tp_row(torch_="1/3")])
    assert "below the fp32 tolerance 1e-05 (a chosen threshold)" in good[0]
    assert "made 1/1 all-reduces (fwd/bwd), one per direction" in good[1]
    assert "DTensor plan made 1/3, a different count" in good[1] and ", equal to tokens" in good[1]
    assert "Each reduced a tensor of 4,096 B" in good[1] and "sends 2(t-1)/t of it per rank, 4,096 B" in good[1]
    assert good[2] == ("attention: 2 ranks (split) 3 ms vs one process alone with 2 thread(s) (whole) 1 ms, "
                       "means of 10 alternated pairs; split - whole per pair 2 ms ± 0.3 (paired 95 % CI): "
                       "the split took 3.00x the time of one process, beyond the paired interval.")
    assert good[3].startswith("Split vs one process on the same cores, 1 block x rank-count case(s): the split "
                              "faster in 0, slower in 1, undecided in 0")
    bad = F.tp([_tp_row(err=1e-3, ours="2/1", bytes_each=8192)])
    assert "ABOVE the fp32 tolerance" in bad[0]
    assert "NOT one per direction" in bad[1] and "the same count" not in bad[1] and "NOT equal to" in bad[1]


def test_summary_has_tp_bubble_and_memory_lines():
    rows = _bubble_rows([0.55, 0.4]) + _bubble_rows([0.55, 0.4], sched="1f1b", held=[1, 2])
    out = F.findings([_tp_row()], rows)
    assert len(out) == 5 and "fp32 tolerance" in out[0] and "[SLEEP stand-in] gpipe measured bubble" in out[1]
    assert out[2].startswith("[SLEEP stand-in] 1F1B vs GPipe bubble, p=2") and "Most micro-batches" in out[3]
    assert out[4].startswith("No real-compute run here")
    real = F.findings([_tp_row()], rows, real_rows=_real_rows())
    assert any(s.startswith("[real compute] gpipe (p=2), m=1 -> m=8") for s in real)
    assert not any("No real-compute run" in s for s in real)


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
def test_tp_timings_use_the_paired_interval_against_one_process_alone():
    faster = F.timings([_tp_row(split=(72.5, 50.0), whole=(139.0, 50.0), paired=(-66.5, 8.0))])
    assert "means of 10 alternated pairs" in faster[0] and "fastest" not in " ".join(faster)
    assert "one process alone with 2 thread(s)" in faster[0]
    assert "the split took 0.52x the time of one process, beyond the paired interval" in faster[0]
    # the unpaired intervals (±50 each) would have covered the gap: the pairs decide it
    assert "the split faster in 1, slower in 0, undecided in 0" in faster[1]
    assert "not timed on their own" in faster[1] and "do not isolate" not in faster[1]
    overlap = F.timings([_tp_row(split=(72.5, 5.0), whole=(139.0, 5.0), paired=(-66.5, 70.0))])
    assert f"{INCONCLUSIVE}, the paired interval covers zero" in overlap[0] and len(overlap) == 1
    one = F.timings([_tp_row(paired=(2.0, float("nan")))])
    assert "one pair gives no interval" in one[0] and len(one) == 1          # one run each: nothing decided
    crowded = F.timings([_tp_row(ranks=4, cores=2, split=(30.0, 1.0), whole=(100.0, 1.0), paired=(-70.0, 2.0))])
    assert "the 4 ranks shared 2 cores, taking turns" in crowded[0]
    assert "above the 2 core(s) the ranks had is more than parallel compute explains" in crowded[0]
    # a speed-up beyond the cores confounds the summary: it must not read as TP's own cost
    assert "1 of the faster case(s) beat the one process by more than the cores" in crowded[1]
    assert "these times do not isolate tensor parallelism's cost" in crowded[1]


def test_tp_timing_names_the_pair_that_makes_the_interval():
    """Issue 42 read 2, item 6: beside the t-interval, the median pair, the sign count and the
    pair furthest from the median (one slow run can make a wide interval by itself)."""
    pairs = [(700.0, 1900.0)] + [(650.0, 450.0)] * 7 + [(600.0, 640.0)] * 2
    diffs = [s - w for w, s in pairs]
    row = _tp_row(paired=spread.mean_and_ci(diffs))
    row["pairs"] = pairs
    line = F.timings([row])[0]
    assert f"{INCONCLUSIVE}, the paired interval covers zero" in line
    assert "median pair -200 ms, the split faster in 7 of 10 pairs (sign test p = 0.34)" in line
    assert "furthest from the median: pair 1, split 1,900 ms vs whole 700 ms" in line
    rows = runs.tp_rows({"world_size": 2, "blocks": [_lab_block(pairs)]})
    assert rows[0]["split faster (pairs)"] == "7/10" and rows[0]["median split - whole"] == -200.0
    assert "pairs" not in runs.tp_table(rows)[0]


def _lab_block(pairs):
    """A lab block whose timed runs are `pairs` (whole, split)."""
    return dict(TP_REPORT["blocks"][0], out_err=0.0, grad_err=0.0, dtensor_out_err=0.0, dtensor_grad_err=0.0,
                scratch_vs_dtensor_err=0.0, dtensor_collectives={"forward": 1, "backward": 1},
                formula_bytes=1024, ms_whole_runs=[w for w, _ in pairs], ms_split_runs=[s for _, s in pairs],
                timed_runs=len(pairs), whole_threads=2, cores=2)


def test_tp_rows_give_the_mean_and_ci_of_the_lab_runs_and_the_paired_gap():
    block = dict(TP_REPORT["blocks"][0], out_err=0.0, grad_err=0.0, dtensor_out_err=0.0, dtensor_grad_err=0.0,
                 scratch_vs_dtensor_err=0.0, dtensor_collectives={"forward": 1, "backward": 1},
                 formula_bytes=1024, ms_whole_runs=[1.0, 4.0, 2.0], ms_split_runs=[2.0, 3.0, 5.0], timed_runs=3,
                 whole_threads=2, cores=2)
    row = runs.tp_rows({"world_size": 2, "blocks": [block]})[0]
    assert (row["ms whole"], row["ms split"], row["runs"]) == pytest.approx((7 / 3, 10 / 3, 3))
    assert row["± whole"] == pytest.approx(spread.mean_ci([1.0, 4.0, 2.0]))     # not half of 1..4
    assert row["± split"] == pytest.approx(spread.mean_ci([2.0, 3.0, 5.0]))
    assert row["split - whole"] == pytest.approx(1.0)                            # pairs: 1, -1, 3
    assert row["± paired"] == pytest.approx(spread.mean_ci([1.0, -1.0, 3.0]))
    assert row["whole threads"] == 2


def test_tp_rows_errors_are_relative_to_the_whole_blocks_values():
    block = dict(TP_REPORT["blocks"][0], out_err=2e-6, grad_err=4e-12, dx_err=1e-12, dtensor_out_err=0.0,
                 dtensor_grad_err=0.0, scratch_vs_dtensor_err=0.0, scratch_vs_dtensor_rel=3e-7,
                 dtensor_collectives={"forward": 1, "backward": 1}, formula_bytes=1024,
                 out_scale=4.0, dx_scale=1e-5, grad_scale=1e-5)
    row = runs.tp_rows({"world_size": 2, "blocks": [block]})[0]
    assert row["out err"] == pytest.approx(5e-7) and row["grad err"] == pytest.approx(4e-7)
    assert row["dx err"] == pytest.approx(1e-7) and row["ours vs DTensor"] == pytest.approx(3e-7)
    bad = runs.tp_rows({"world_size": 2, "blocks": [dict(block, grad_err=1e-9)]})[0]
    assert "ABOVE the fp32 tolerance" in F.tp([bad])[0]   # 1e-9 absolute, but 1e-4 of grads ~1e-5


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


def _sched_rows(gpipe, f1b, spread, p=4, jitter=0.0):
    """Rows of interleaved runs: each row's steps are its mean -/+ jitter (a pair per step)."""
    ms = [4, 8, 16]

    def steps(b):
        return [b - jitter, b + jitter, b]
    return ([{"stages": p, "schedule": "gpipe", "m": m, "measured": b, "spread": spread, "bubbles": steps(b),
              "formula": bubble_formula(p, m), "max in flight": m} for m, b in zip(ms, gpipe)]
            + [{"stages": p, "schedule": "1f1b", "m": m, "measured": b, "spread": spread, "bubbles": steps(b),
                "formula": bubble_formula(p, m), "max in flight": p} for m, b in zip(ms, f1b)])


def test_schedules_decide_from_the_paired_differences():
    # each schedule's own ± (0.1) covers every gap; the pairs move together, so the gaps decide
    line = F.schedules(_sched_rows([0.46, 0.32, 0.21], [0.45, 0.28, 0.17], spread=0.1, jitter=0.1))[0]
    assert line.startswith("1F1B vs GPipe bubble, p=4, interleaved step by step (1F1B - GPipe, mean of the "
                           "pairs ± paired 95 % CI: -0.01 ± 0 at m=4")
    assert line.endswith("1F1B lower beyond the paired interval at m=4, m=8, m=16 (3 of 3 m values, all the "
                         "same way: a consistent difference).")
    worse = F.schedules(_sched_rows([0.46, 0.32, 0.21], [0.46, 0.40, 0.21], spread=0.1, jitter=0.1))[0]
    assert "1F1B higher beyond the paired interval at m=8: decided at 1 of 3 m values only (signs of the " \
           "others: 0 at m=4, 0 at m=16): no consistent difference" in worse
    rows = _sched_rows([0.46, 0.32, 0.21], [0.45, 0.31, 0.2], spread=0.02)
    for r in rows:     # pairs that do not move together: a paired interval of about ±0.05
        if r["schedule"] == "1f1b":
            r["bubbles"] = [r["measured"] + d for d in (0.03, -0.03, 0.0)]
    same = F.schedules(rows)[0]
    assert f"no gap beyond the paired intervals at any m ({INCONCLUSIVE}: at each m a gap smaller than its own" in same
    assert same.endswith("consistent with equal bubbles.")


def _real_rows(measured=(0.6, 0.55, 0.53, 0.5), spread=0.1, idle=(0.2, 0.3, 0.35, 0.4)):
    rows = _bubble_rows(list(measured), spread=spread)
    for r, i in zip(rows, idle):
        r.update(overlap=0.25, idle=i, bubbles=[r["measured"]] * 3, **{"steps ms": [100.0] * 3,
                 "F ms": 10.0, "B ms": 20.0})
    return rows


def test_real_compute_says_why_m_did_not_decide_and_never_claims_no_overlap():
    out = F.real_compute(_real_rows())
    assert all(s.startswith("[real compute]") for s in out)
    why = next(s for s in out if "drops by" in s)
    assert why.startswith("[real compute] gpipe (p=2), m=1 -> m=8: the formula (p-1)/(m+p-1) drops by 0.389, "
                          "the measured bubble by 0.1 ± 0.141")
    assert f"{INCONCLUSIVE} whether micro-batches shrank it (a stage was busy" in why
    assert "Why the bubble sits 0.389 above the formula at m=8: the formula" in why
    assert "expects each stage to compute 88.9 % of the step; here a stage computed 50 % (1 - bubble)" in why
    assert "at the same time for only 25 % of the step and for 40 % none did (20 % at m=1" in why
    assert "without the others for 35 % of the step, more than they computed together: they mostly took turns" in why
    rows = _real_rows()
    rows[-1]["overlap"] = 0.5                  # 0.5 together, 0.1 alone: no claim about turns
    why = next(s for s in F.real_compute(rows) if "drops by" in s)
    assert "no more than they computed together: this run does not show what set the bubble" in why
    assert "1 - 1/p" not in " ".join(out)       # stages that overlap 25 % do not take turns
    assert any("two stages computed at the same time for 25 %" in s for s in out)
    both = _real_rows() + [dict(r, schedule="1f1b", **{"F ms": 12.0}) for r in _real_rows()[1:]]
    fb = [s for s in F.real_compute(both) if "forward/backward took" in s]
    assert len(fb) == 1 and " yet " not in fb[0]     # per-micro-batch times carry no interval: no verdict
    assert "(means of the steps, not compared with an interval): no verdict on a difference" in fb[0]
    assert "not the schedule" not in fb[0] and "same work" not in fb[0]
    shrank = next(s for s in F.real_compute(_real_rows(spread=0.01)) if "drops by" in s)
    assert "micro-batches shrank the bubble in this run, beyond the intervals, and the step per " \
           "micro-batch did not grow" in shrank and "micro-batching helped here" in shrank
    labelled = F.real_compute(_real_rows(), hardware="CPU/gloo")
    assert all(s.startswith("[real compute, CPU/gloo]") for s in labelled)


def test_a_bubble_that_falls_because_busy_time_swells_is_not_called_help():
    """Issue 42 read 2, item 1: the bubble fell, but each micro-batch's step grew: not 'helped'."""
    rows = _real_rows(spread=0.01)
    for r in rows:        # step per micro-batch 30 ms at m=1 growing to 60 ms at m=8
        r["steps ms"] = [x * r["m"] * (1 + (r["m"] - 1) / 7) for x in (29.0, 30.0, 31.0)]
    why = next(s for s in F.real_compute(rows) if "drops by" in s)
    assert "the measured bubble fell beyond the intervals, but a stage was busy" in why
    assert "the step took 30 ms ± 2.48 per micro-batch at m=1 vs 60 ms ± 4.97 at m=8" in why
    assert "the step per micro-batch GREW" in why and "does not show micro-batching helping" in why
    assert "shrank the bubble" not in why


def test_bytes_rows_compare_forms_on_one_model():
    tp = dict(TP_REPORT, batch=2, seq=8, d_model=16)     # the lab reports its sizes
    rows = {r["form"]: r for r in runs.measured_bytes(tp, PP_REPORT)}
    act = 2 * 8 * 16 * 4                                    # the TP blocks' activation, not the PP lab's
    assert rows["pipeline (PP)"]["bytes per step"] == 2 * act
    assert rows["data (DP)"]["bytes per step"] == 1000 * 4
    assert rows["tensor (TP)"]["bytes per step"] == 2048
    assert rows["tensor (TP)"]["sent per rank (ring)"] == 2048     # 2(t-1)/t = 1 at t = 2
    four = {r["form"]: r for r in runs.measured_bytes(dict(tp, world_size=4), PP_REPORT)}
    assert four["tensor (TP)"]["sent per rank (ring)"] == 1.5 * 2048
    note = runs.pipeline_lab_bytes(PP_REPORT)
    assert "2 x 4 x 4 x 8 x 4 B = 1,024 B" in note and "not comparable" in note


def test_a_non_monotone_bubble_is_not_called_falling():
    text = F.bubble(_bubble_rows([0.5, 0.3, 0.35, 0.2], spread=0.01))[0]
    assert "larger at m=1 than at m=8, beyond the intervals" in text
    assert "1 of the 3 steps between them not decided that way" in text
    assert "falls" not in text


def test_an_interval_below_the_formula_says_the_steps_do_not_pin_the_mean():
    row = dict(_bubble_rows([0.5, 0.33, 0.318], spread=0.162)[2], bubbles=[0.3] * 5)
    text = F.bubble([row])[-1]
    assert "reaches below 0.2, the least idle share equal stages can have: the 5 steps" in text


def test_bubble_plot_tells_the_formulas_apart_and_draws_the_real_run():
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.model_parallel import plots
    rows = (_bubble_rows([0.55, 0.4, 0.3]) + _bubble_rows([0.7, 0.5, 0.4], p=4)
            + _bubble_rows([0.5, 0.4], sched="1f1b"))
    fig = plots.plot_bubble(rows, real_rows=_real_rows())
    ax = fig.axes[0]
    formulas = [ln for ln in ax.get_lines() if ln.get_label().startswith("(p-1)/(m+p-1)")]
    assert len({(ln.get_color(), ln.get_linestyle()) for ln in formulas}) == 2
    assert any("real compute" in t.get_text() for t in ax.get_legend().get_texts())
    offsets = {a.xyann for a in ax.texts}
    assert len(offsets) == 3            # GPipe and 1F1B labels apart, the real run (GPipe here) further out
    assert all(dx > 0 for dx, _ in offsets)      # right of the point: never over the y ticks
    points = [c for c in ax.containers]
    colors = [matplotlib.colors.to_hex(c[0].get_color()) for c in points]
    assert len(set(colors)) == len(colors)       # one colour per (run, p, schedule) ...
    assert not set(colors) & {matplotlib.colors.to_hex(ln.get_color()) for ln in formulas}   # ... none a formula's
    xs = {c.get_label(): list(c[0].get_xdata()) for c in points}
    g = xs["gpipe, p=2,  (mean ± 95 % CI)"]
    f = xs["1f1b, p=2,  (mean ± 95 % CI)"]
    assert g[1] < 2 < f[1]              # at the same m the squares sit beside the circles, not on them


def test_tp_plot_shows_the_all_reduce_counts_ours_and_dtensor():
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.model_parallel import plots
    fig = plots.plot_tp([_tp_row(torch_="1/3")])
    widths = [b.get_width() for b in fig.axes[1].patches]
    assert widths == [1, 1, 1, 3]       # ours 1/1, DTensor 1/3: attention's 3 backward reductions shown


def test_bytes_plot_uses_a_linear_axis():
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.model_parallel import plots
    fig = plots.plot_bytes({"TP": 8.19e3, "PP": 4.1e3}, "t", unit=1)
    assert fig.axes[0].get_xscale() == "linear" and fig.axes[0].get_xlim()[0] == 0


def test_m_in_the_same_rounds_is_decided_per_round():
    """When every m ran in the same rounds, the bubble's fall and the step per micro-batch are
    paired within each round (the round's noise cancels), not pooled across them."""
    rows = _real_rows(spread=0.5)                 # unpaired intervals far too wide to decide
    noise = (1.0, 3.0, 2.0)                       # each round's slowness, shared by every m
    for r in rows:
        r["m in rounds"] = True
        r["steps ms"] = [10.0 * r["m"] * k for k in noise]
        r["bubbles"] = [r["measured"] + 0.1 * k for k in noise]
    why = next(s for s in F.real_compute(rows) if "drops by" in s)
    assert "the measured bubble by 0.1 ± " in why and "(paired within each of the 3 rounds, 95 % CI" in why
    assert "the step per micro-batch at m=8 was 1x ± " in why and "ratio within each round" in why
    assert "micro-batches shrank the bubble in this run, beyond the intervals" in why
    assert "nor did it fall beyond them" in why
