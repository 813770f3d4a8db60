"""Lab 09's moe.py on 2 gloo ranks (one module-scoped study: the course's layer, DeepSpeed's, and a
skewed router trained with and without the auxiliary loss), its refusals, and the study's rows,
findings and plots (dltutor.experts.runs / findings / plots / deepspeed_moe)."""
from __future__ import annotations

import importlib.util
import math

import pytest

from dltutor.core.course import lab
from dltutor.core.findings import INCONCLUSIVE, differs
from dltutor.experts import deepspeed_moe as DS
from dltutor.experts import findings as F
from dltutor.experts import runs as R

STEPS = 40


@pytest.fixture(scope="module")
def study():
    return R.run_study(2, tiny=True, steps=STEPS, sweep_skews="0,1", sweep_capacity="1,2",
                       sweep_tokens="32,256", repeats=2)


def _lab_module():
    spec = importlib.util.spec_from_file_location("lab09_moe", lab(R.LAB))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- the lab on real ranks
def test_course_lab_reports_every_step_on_every_rank(study):
    reps = study["course"]
    assert [r["rank"] for r in reps] == [0, 1] and all(r["data"] == "Fashion-MNIST" for r in reps)
    for r in reps:
        assert len(r["steps"]) == STEPS and 0 <= r["test_accuracy"] <= 1
        for s in r["steps"]:
            assert sum(s["load"]) == r["tokens_per_rank"] * r["top_k"]      # every slot routed
            assert math.isfinite(s["loss"]) and s["alltoall_s"] > 0 and s["step_s"] > 0
    for s0, s1 in zip(reps[0]["steps"], reps[1]["steps"]):   # what one rank sends the other receives
        assert s0["tokens_sent"] == s1["tokens_received"] and s1["tokens_sent"] == s0["tokens_received"]
        assert s0["tokens_sent"] > 0


def test_replicated_parameters_stay_equal_and_experts_differ(study):
    for key in ("course", "deepspeed"):
        a, b = study[key]
        assert a["replicated_sum"] == pytest.approx(b["replicated_sum"], rel=1e-12, abs=1e-12)
        assert a["expert_sum"] != b["expert_sum"]


def test_the_model_learns(study):
    for key in ("course", "deepspeed"):
        steps = study[key][0]["steps"]
        first = sum(s["loss"] for s in steps[:5]) / 5
        last = sum(s["loss"] for s in steps[-5:]) / 5
        assert last < first


def test_deepspeed_layer_reports_its_capacity_and_counts(study):
    reps = study["deepspeed"]
    for r in reps:
        assert r["layer"] == "deepspeed.moe.layer.MoE" and r["min_capacity"] == DS.MIN_CAPACITY
        for s in r["steps"]:
            assert s["capacity"] == DS.ds_capacity(r["tokens_per_rank"], r["experts"], r["top_k"],
                                                   r["capacity_factor"])
            assert sum(s["load"]) == r["tokens_per_rank"] * r["top_k"] and 0 <= s["dropped_fraction"] <= 1
    rows = R.side_by_side(study)
    assert len(rows) == STEPS and rows[0]["course capacity"] == DS.course_capacity(
        reps[0]["tokens_per_rank"], reps[0]["experts"], reps[0]["top_k"], reps[0]["capacity_factor"])
    assert any("DeepSpeed" in line for line in F.deepspeed_findings(rows, study))


def test_aux_loss_evens_the_load_in_a_seeded_run(study):
    rows = {r["run"]: r for r in R.load_rows(study)}
    on, off = rows["with aux loss"], rows["without aux loss"]
    key, ci = "max/mean load, last steps", "± last"
    assert on[key] < off[key] and differs(on[key], off[key], on[ci], off[ci])
    assert "evened" in " ".join(F.aux_findings(list(rows.values())))


def test_drops_fall_with_capacity_and_none_without_a_limit(study):
    rows = R.drop_rows(study)
    assert all(r["dropped fraction"] == 0 for r in rows if r["capacity factor"] == "none")
    for skew in {r["skew"] for r in rows}:
        pts = sorted((r["capacity factor"], r["dropped fraction"]) for r in rows
                     if r["skew"] == skew and r["capacity factor"] != "none")
        assert all(b[1] <= a[1] for a, b in zip(pts, pts[1:]))
    at1 = {r["skew"]: r["dropped fraction"] for r in rows if r["capacity factor"] == 1.0}
    assert at1[1.0] > at1[0.0]                  # the skewed router overflows expert 0


def test_straggler_rows_count_every_slot(study):
    rows = R.straggler_rows(study)
    assert [r["skew"] for r in rows] == [0.0, 1.0]
    slots = study["course"][0]["top_k"] * sum(r["sweep"][0]["tokens"] for r in study["course"])
    assert all(sum(r["rows per rank"]) == slots and r["max/mean rows"] >= 1 for r in rows)
    assert rows[1]["max/mean rows"] > rows[0]["max/mean rows"]


def test_alltoall_fit_uses_the_token_sweep(study):
    fit = R.fit_alltoall(R.alltoall_points(study))
    assert fit["alpha"] >= 0 and fit["beta"] >= 0 and len(fit["points"]) == 4
    assert len({p["bytes"] for p in fit["points"]}) == 2
    assert F.alltoall_findings(fit)[0].startswith("Fitted")


def test_plots_draw(study, tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dltutor.experts import plots as P
    for fig in (P.plot_load(study), P.plot_drops(R.drop_rows(study)),
                P.plot_straggler(R.straggler_rows(study)),
                P.plot_alltoall(R.fit_alltoall(R.alltoall_points(study)))):
        title = (fig._suptitle.get_text() if fig._suptitle else "") + fig.axes[0].get_title()
        assert "Fashion-MNIST" in title and "CPU/gloo" in title
        plt.close(fig)


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("argv,flag,env", [
    (["--experts", "4", "--top-k", "5"], "--top-k", {}),
    (["--capacity-factor", "0"], "capacity factor", {}),
    (["--capacity-factor", "-1"], "capacity factor", {}),
    (["--experts", "4"], "--experts", {"RANK": "0", "WORLD_SIZE": "3"}),
    (["--impl", "deepspeed", "--skew", "1"], "--impl deepspeed", {}),
])
def test_lab_refuses_bad_input(argv, flag, env, capsys, monkeypatch):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    mod = _lab_module()
    with pytest.raises(SystemExit) as exc:
        mod.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and flag in err and "Traceback" not in err


# ---------------------------------------------------------------- findings on synthetic rows
def _load(on_last, on_ci, off_last, off_ci):
    base = {"max/mean load, first steps": 2.0, "± first": 0.01, "steps averaged": 10,
            "test accuracy": 0.8, "test images": 1000, "final loss": 0.5}
    return [{**base, "run": "with aux loss", "aux weight": 0.1, "max/mean load, last steps": on_last,
             "± last": on_ci},
            {**base, "run": "without aux loss", "aux weight": 0.0, "max/mean load, last steps": off_last,
             "± last": off_ci}]


def test_aux_findings_decide_with_the_intervals():
    assert "evened the load" in " ".join(F.aux_findings(_load(1.2, 0.05, 1.9, 0.05)))
    assert "did NOT even" in " ".join(F.aux_findings(_load(1.9, 0.05, 1.2, 0.05)))
    wide = " ".join(F.aux_findings(_load(1.5, 0.4, 1.7, 0.4)))
    assert INCONCLUSIVE in wide and "evened" not in wide


def test_drop_findings_follow_the_numbers():
    rows = [{"skew": s, "capacity factor": cf, "dropped fraction": d, "capacity": None, "slots": 100}
            for s, cf, d in [(0, 1.0, 0.1), (0, 2.0, 0.0), (2, 1.0, 0.3), (2, 2.0, 0.05)]]
    text = F.drop_findings(rows)
    assert "at skew 2 falls" in text[1] and "rises as skew grows" in text[2]
    assert "skew 0: 2" in text[3] and "skew 2: none of those tried" in text[3]


def test_straggler_findings_decide_on_the_paired_time_ratio():
    row = {"skew": 1.0, "rows per rank": [120, 80], "max/mean rows": 1.2, "busiest rank": 0,
           "least busy rank": 1, "rows ratio": 1.5, "repeats": 10, "extra expert ms": 2.0,
           "± extra": 0.5, "wait ms": 1.8, "± wait": 0.4}
    near = F.straggler_findings([{**row, "time ratio": 1.1, "± time ratio": 0.2}])
    slower = F.straggler_findings([{**row, "time ratio": 1.4, "± time ratio": 0.1}])
    faster = F.straggler_findings([{**row, "time ratio": 0.7, "± time ratio": 0.1}])
    assert INCONCLUSIVE in near[1] and INCONCLUSIVE not in slower[1] and "1.4x their time" in slower[1]
    assert "waited for the busier rank" in slower[1] and "FASTER" in faster[1]
    unsure_wait = F.straggler_findings([{**row, "time ratio": 1.4, "± time ratio": 0.1, "± wait": 5.0}])
    assert "its wait is " + INCONCLUSIVE in unsure_wait[1]


def test_straggler_rows_pair_the_ranks_repeat_by_repeat():
    def part(rows, times, a2a):
        return {"expert_rows": rows, "experts_s": times, "alltoall_s": a2a}
    sweep = lambda *a: {"sweep": [{"skew": 2.0, "capacity_factor": "none", **part(*a)}]}  # noqa: E731
    study = {"course": [sweep(300, [2.0, 4.0, 6.0], [0.1, 0.2, 0.3]),
                        sweep(100, [1.0, 2.0, 3.0], [1.1, 2.2, 3.3])]}
    (row,) = R.straggler_rows(study)
    assert row["busiest rank"] == 0 and row["rows ratio"] == 3.0
    assert row["time ratio"] == 2.0 and row["± time ratio"] == 0.0   # paired: every repeat 2x
    assert round(row["wait ms"]) == 2000 and round(row["extra expert ms"]) == 2000


def test_alltoall_findings_say_where_the_model_misses():
    pts = [{"bytes": 1000.0, "seconds": s} for s in (1e-3, 1.1e-3, 0.9e-3)]
    inside = F.alltoall_findings({"alpha": 1e-3, "beta": 1e-9, "points": pts, "model": [1.001e-3] * 3})
    outside = F.alltoall_findings({"alpha": 1e-4, "beta": 1e-9, "points": pts, "model": [1.01e-4] * 3})
    assert "inside the interval" in inside[1] and "below it" in outside[1]


def test_fit_recovers_a_known_alpha_beta():
    pts = [{"bytes": float(b), "seconds": 2e-4 + b * 5e-9} for b in (1e3, 1e4, 1e5, 1e6)]
    fit = R.fit_alltoall(pts)
    assert fit["alpha"] == pytest.approx(2e-4, rel=1e-6) and fit["beta"] == pytest.approx(5e-9, rel=1e-6)


def test_capacity_formulas_differ_by_the_floor():
    assert DS.ds_capacity(8, 4, 2, 1.0) == 4 == DS.course_capacity(8, 4, 2, 1.0)
    assert DS.ds_capacity(2, 4, 1, 1.0) == DS.MIN_CAPACITY and DS.course_capacity(2, 4, 1, 1.0) == 1


def test_alltoall_findings_say_whether_the_line_describes_anything():
    def fit(samples, model):
        pts = [{"bytes": 1000.0 * (i + 1), "seconds": s} for i in range(3) for s in samples]
        return {"alpha": 1e-4, "beta": 1e-9, "points": pts, "model": [model] * len(pts), "hardware": "CPU/gloo"}
    stalls = [0.9e-3, 1.1e-3] * 20 + [10e-3] * 8        # a few stalls raise the mean
    typical = F.alltoall_findings(fit(stalls, 1.1e-3))[-1]
    assert "describes the typical all-to-all" in typical and "CPU/gloo" in typical
    assert "lower bound" in F.alltoall_findings(fit(stalls, 0.95e-3))[-1]   # in the middle, under the median
    assert "do not describe" in F.alltoall_findings(fit(stalls, 1e-4))[-1]
    assert "describes these all-to-alls" in F.alltoall_findings(fit([1e-3, 1.1e-3, 0.9e-3], 1e-3))[-1]


def test_straggler_findings_give_rank_0s_own_offset_at_skew_0():
    base = {"skew": 0.0, "rows per rank": [100, 100], "max/mean rows": 1.0, "busiest rank": 0,
            "least busy rank": 1, "rows ratio": 1.0, "repeats": 10, "expert ms per rank": [1.1, 1.0],
            "time ratio": 1.1, "± time ratio": 0.5, "extra expert ms": 0.1, "± extra": 0.5,
            "wait ms": 0.0, "± wait": 0.5}
    text = F.straggler_findings([base])
    assert "lives on rank 0" in text[1] and "took 1.10x its expert time" in text[1]


def test_straggler_plot_carries_each_ranks_interval():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.container import ErrorbarContainer

    from dltutor.experts import plots as P
    rows = [{"skew": s, "rows per rank": [120, 80], "expert ms per rank": [2.0, 1.5],
             "± expert ms per rank": [0.3, 0.2]} for s in (0.0, 1.0)]
    fig = P.plot_straggler(rows)
    bars = [c for c in fig.axes[1].containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 2 and "95 % CI" in fig.axes[1].get_ylabel()
    plt.close(fig)
