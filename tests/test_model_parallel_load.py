"""Notebook 06 after the second expert read of issue 42: the load around each timed launch, the
strategy table's TP entry with its paired interval, the check table's units, the summary's labels."""
from __future__ import annotations

import math

from dltutor.model_parallel import findings as F
from dltutor.model_parallel import runs
from dltutor.model_parallel.load import load1, load_sentence


def test_load_is_read_and_said_beside_the_cores(tmp_path):
    f = tmp_path / "loadavg"
    f.write_text("9.51 8.00 7.00 3/400 1234\n")
    assert load1(f) == 9.51 and math.isnan(load1(tmp_path / "missing"))
    busy = load_sentence("TP runs, 2 ranks", 9.51, 11.2, cores=2)
    assert busy.startswith("TP runs, 2 ranks: 1-minute load average 9.51 before, 11.20 after, on 2 core(s)")
    assert "ABOVE the cores" in busy and "contended" in busy
    assert load_sentence("x", 0.5, 1.5, cores=2).endswith("not above the cores.")
    assert "not known" in load_sentence("x", math.nan, 1.0, cores=2)


def test_runs_record_the_load_around_each_launch(monkeypatch):
    class Result:
        metrics = [{"world_size": 2, "checks": []}]
    loads = iter([3.0, 5.0, 1.0, 2.0])
    monkeypatch.setattr(runs, "launch", lambda *a, **k: Result())
    monkeypatch.setattr(runs, "load1", lambda: next(loads))
    assert runs.run_tp(2)["load"] == (3.0, 5.0)
    assert runs.run_pipeline(2)["load"] == (1.0, 2.0)


def _block(whole, split):
    return {"block": "mlp", "bytes_forward": 1024, "bytes_backward": 1024, "params_full": 1000,
            "params_per_rank": 500, "allreduce_forward": 1, "allreduce_backward": 1,
            "ms_whole": whole[0], "ms_split": split[0], "ms_whole_runs": whole, "ms_split_runs": split,
            "timed_runs": len(whole)}


def test_strategy_table_carries_the_paired_interval_and_verdict():
    pp = {"world_size": 2, "work": "SLEEP", "runs": [
        {"schedule": "gpipe", "m": m, "bubble": 0.3, "bubbles": [0.3, 0.3], "stages": 2} for m in (1, 4)]}
    tp = {"world_size": 2, "hardware": "CPU/gloo", "blocks": [_block([600.0, 700.0, 650.0], [1900.0, 450.0, 460.0])]}
    cell = {r["strategy"]: r for r in runs.strategy_table(tp, pp)}["tensor"]["this notebook"]
    assert "split - whole 286.7 ±" in cell and "(paired 95 % CI): inconclusive here" in cell
    tp["blocks"] = [_block([600.0, 700.0, 650.0], [400.0, 500.0, 450.0])]
    cell = {r["strategy"]: r for r in runs.strategy_table(tp, pp)}["tensor"]["this notebook"]
    assert "split - whole -200.0 ± 0.0 ms (paired 95 % CI): split faster" in cell


def test_check_rows_say_absolute_and_the_chosen_tolerance():
    report = {"world_size": 2, "checks": [
        {"schedule": "gpipe", "m": 4, "ref_loss": 2.0, "pipeline_loss": 2.0, "loss_err": 1e-6, "grad_err": 1e-7},
        {"schedule": "1f1b", "m": 4, "ref_loss": 2.0, "pipeline_loss": 2.1, "loss_err": 0.1, "grad_err": 1e-7}]}
    rows = runs.check_rows(report)
    assert [r["loss within (chosen)"] for r in rows] == ["1e-05 x |loss|: yes", "1e-05 x |loss|: NO"]
    assert runs.CHECK_HEADERS == {"loss_err": "loss err (abs)", "grad_err": "max grad err (abs)"}


def test_summary_labels_the_real_compute_with_its_hardware():
    rows = [{"stages": 2, "schedule": "gpipe", "m": m, "measured": b, "spread": 0.01, "formula": 1 / (m + 1),
             "max in flight": m, "overlap": 0.3, "idle": 0.1, "bubbles": [b] * 3, "steps ms": [10.0 * m] * 3,
             "F ms": 1.0, "B ms": 2.0} for m, b in ((1, 0.5), (8, 0.3))]
    real = [s for s in F.real_compute(rows, hardware="CPU/gloo") if "drops by" in s]
    assert real and real[0].startswith("[real compute, CPU/gloo] gpipe (p=2), m=1 -> m=8")
