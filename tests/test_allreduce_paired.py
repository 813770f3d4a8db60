"""Issue #42 (notebook 05 read): algorithms are compared paired over the passes that timed them
together, the tables name the statistic they show (fastest / median / slowest pass), and a run
says from its numbers which passes were disturbed."""
from __future__ import annotations

import math

from dltutor.allreduce import paired, sweep_table
from dltutor.core.findings import INCONCLUSIVE


def test_a_slow_minute_that_hits_both_cancels_in_the_paired_ratio():
    # B is 1.2x A in every pass, but passes 2..5 were 5-50x slower for both (a busy machine):
    load = [1, 5, 20, 50, 8]
    a, b = [1e-3 * x for x in load], [1.2e-3 * x for x in load]
    r = paired.ratio(a, b)
    assert r.decided and r.wins == 5 and math.isclose(r.geo, 1 / 1.2)
    assert paired.ratio_text("a", "b", r).startswith("a is 0.83x b (95 % CI")
    # unpaired, the means' intervals would overlap: the paired interval must not
    assert r.hi < 1


def test_pairs_that_disagree_are_inconclusive_and_one_pass_decides_nothing():
    r = paired.ratio([1, 2, 1, 2], [2, 1, 2, 1.1])
    assert not r.decided and INCONCLUSIVE in paired.ratio_text("a", "b", r)
    one = paired.ratio([1.0], [2.0])
    assert not one.decided and "one pass gives no interval" in paired.ratio_text("a", "b", one)
    assert paired.ratio([2, 2.1, 1.9], [1, 1, 1]).excludes(1.0)
    assert not paired.ratio([2, 2.1, 1.9], [1, 1, 1]).excludes(2.0)


def _row(alg, times):
    return {"algorithm": alg, "bytes": 1024, "time_s": min(times), "time_range_s": [min(times), max(times)],
            "times_s": times, "algbw_GBps": 1.0, "busbw_GBps": 1.0}


def test_disturbed_passes_are_named_from_the_numbers():
    rows = [_row("ring", [224e-6, 4591e-6, 7045e-6, 5464e-6, 11197e-6]),
            _row("gloo", [283e-6, 300e-6, 2000e-6, 290e-6, 2460e-6])]
    assert paired.pass_load(rows)[0] == 1.0
    line = paired.disturbance_line(rows, "N = 2")
    assert "Passes 2, 3, 4, 5 of 5 were disturbed" in line and "up to 50x its fastest" in line
    calm = [_row("ring", [1e-3, 1.1e-3, 1.05e-3])]
    assert "no pass sat above 1.5x the fastest" in paired.disturbance_line(calm, "N = 2")
    assert "load present in every pass does not show" in paired.disturbance_line(calm, "N = 2")
    assert "stay honest" not in line and "only if some pass escaped the load" in line


def test_a_fastest_pass_that_falls_as_d_grows_says_every_pass_was_disturbed():
    # second read, item 3: ring 64 KiB fastest 4809 us, 12x the 256 KiB one (395 us)
    rows = [dict(_row("ring", [4809e-6, 6000e-6, 9000e-6]), bytes=64 << 10),
            dict(_row("ring", [395e-6, 900e-6, 1200e-6]), bytes=256 << 10),
            dict(_row("gloo", [100e-6, 110e-6, 120e-6]), bytes=64 << 10),
            dict(_row("gloo", [150e-6, 160e-6, 170e-6]), bytes=256 << 10)]
    assert paired.fastest_inversions(rows) == [("ring", 64 << 10, 4809e-6, 256 << 10, 395e-6)]
    line = paired.disturbance_line(rows, "N = 2", {"before": 15.2, "after": 19.8, "cores": 2, "ranks": 4})
    assert "even the fastest pass is disturbed here: ring at 64 KiB took 4809 us" in line
    assert "12.2x its fastest at the larger 256 KiB (395 us)" in line and "rerun on an idle node" in line
    assert "load average 15.2 before and 19.8 after the launch on 2 core(s), 4 ranks" in line
    assert paired.fastest_inversions(rows[2:]) == []


def test_the_sweep_table_names_fastest_median_and_slowest():
    rows = [_row("ring", [224e-6, 4591e-6, 7045e-6, 5464e-6, 11197e-6])]
    lines = sweep_table.sweep_lines({2: {"results": rows}})
    assert lines[0].startswith("times: fastest, median and slowest of 5 passes")
    assert "fastest (us)" in lines[1] and "median (us)" in lines[1] and "slowest (us)" in lines[1]
    assert "224.0" in lines[2] and "5464.0" in lines[2] and "11197.0" in lines[2]
    assert "disturbed" in lines[-1]
    hier = sweep_table.hier_lines({"world_size": 4, "results": rows})
    assert hier[2].split()[-3:] == ["224.0", "5464.0", "11197.0"]      # the minimum once, not twice


def test_an_undecided_ratio_says_why_from_its_numbers():
    """Not decided: the gap against the spread, and about how many passes would decide it."""
    r = paired.ratio([1, 1.2, 1, 1.3, 1.1], [1.05, 1.1, 1.1, 1.2, 1.2])
    text = paired.ratio_text("a", "b", r)
    assert INCONCLUSIVE in text and "gap, against a 95 % interval of x/÷" in text and "±" not in text
    assert "paired passes at this spread might decide it, if the gap measured here is the true one" in text
    assert math.ceil(paired.passes_needed(r)) > r.n
    assert "more than 1000" in paired.ratio_text("a", "b", paired.ratio([1, 2, 1, 2], [2, 1, 2, 1.0]))


def test_notebook_05_prints_the_per_rank_bytes_bound_and_the_rank_apart_from_the_chunks():
    """Issue #42 (05 c6): 112 MiB holds only at N = 8 (the bound is 2D), and the slide's "B7P1"
    is printed with the rank apart."""
    import nbformat
    from pathlib import Path
    nb = nbformat.read(Path(__file__).resolve().parent.parent / "course/notebooks/05_ring_allreduce_visualizer.ipynb", 4)
    code = next(c.source for c in nb.cells if c.get("id") == "fc4be5b9")
    assert "at N = 8; however large N gets, it stays below" in code and "2D = " in code
    assert '.removesuffix(f"P{rank}")' in code and '+ f"P{rank}"' not in code


def test_the_2d_plot_draws_the_fastest_pass_the_model_was_fitted_to():
    """Issue #42 (05 c23): model lines fitted to the fastest passes were drawn against means."""
    import matplotlib
    matplotlib.use("Agg")
    import numpy as np
    from dltutor.allreduce import cost
    from dltutor.allreduce.visualizer import plot_hierarchical
    sizes, rows = [1 << 10, 1 << 16, 1 << 20], []
    for alg in ("ring", "gloo", "hierarchical"):
        t = cost.model_time("ring", 4, np.array(sizes, float), 50e-6, 1e-9)
        rows += [{"algorithm": alg, "bytes": d, "time_s": float(x), "times_s": [float(x), 9 * float(x)],
                  "time_range_s": [float(x), 9 * float(x)]} for d, x in zip(sizes, t)]
    ax = plot_hierarchical({"nodes": 2, "per_node": 2, "world_size": 4, "results": rows, "hardware": "CPU/gloo"})
    labels = ax.get_legend_handles_labels()[1]
    assert any("fastest pass (bar: up to the slowest)" in x for x in labels), labels
    ring = ax.containers[0]                       # the ring's dots sit at the fastest pass
    assert np.allclose(ring.lines[0].get_ydata(), [r["time_s"] * 1e6 for r in rows[:3]])


def test_the_busbw_plot_shows_the_passes_spread_and_says_when_every_pass_was_disturbed():
    # second read, plots: fastest pass only, no spread, no note; at N = 2 busbw = algbw unsaid
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.allreduce.visualizer import plot_busbw
    rows = [dict(_row("ring", [4809e-6, 6000e-6, 9000e-6]), bytes=64 << 10),
            dict(_row("ring", [395e-6, 900e-6, 1200e-6]), bytes=256 << 10)]
    ax = plot_busbw({2: {"results": rows, "hardware": "CPU/gloo"}})
    title = ax.get_title()
    assert "median pass, bar from slowest to fastest pass" in title and "N = 2: busbw = algbw" in title
    assert "even the fastest passes were disturbed" in title
    assert len(ax.containers) == 1 and ax.containers[0].has_yerr
    import numpy as np
    assert np.allclose(ax.containers[0].lines[0].get_ydata(), [(64 << 10) / 6000e-6 / 1e9, (256 << 10) / 900e-6 / 1e9])
    segs = ax.containers[0].lines[2][0].get_segments()      # the bar: slowest to fastest pass
    assert np.allclose(sorted(segs[0][:, 1]), [(64 << 10) / 9000e-6 / 1e9, (64 << 10) / 4809e-6 / 1e9])


def test_notebook_05_text_after_the_second_read():
    """Second read: 2-D saves latency steps, not bytes; busbw's one-direction ceiling; recursive
    doubling's two limits; the fit's use is conditional; sources for Horovod's default and async SGD."""
    import nbformat
    from pathlib import Path
    nb = nbformat.read(Path(__file__).resolve().parent.parent / "course/notebooks/05_ring_allreduce_visualizer.ipynb", 4)
    cell = {c.get("id"): c.source for c in nb.cells}
    assert "not fewer bytes" in cell["6085d524"] and "sends less over the slow links" not in cell["6085d524"]
    assert "about 450 GB/s per" in cell["6d99c21e"] and "busbw counts one direction" in cell["6d99c21e"]
    assert "(both directions together), the ceiling for busbw" not in cell["6d99c21e"]
    assert "half the ring's time for small messages and the same for large ones" in " ".join(cell["178e3929"].split())
    assert "a little faster at every size" not in cell["178e3929"]
    summary = " ".join(cell["7a47b2ac"].split())
    assert "*when the fit is usable*" in summary and "all but D/L of the traffic" not in summary
    assert "horovod/common/operations.cc" in cell["9ca9431c"] and "Lian, Huang, Li and Liu" in cell["ps-section-06"]
    assert "Staleness-aware Async-SGD" in " ".join(cell["ps-section-06"].split())
    assert "max(α_intra + D/N·β_intra, α_inter + D/N·β_inter)" in cell["4b750d19"]
    assert "limits.limit_findings(s)" in cell["d4312c9d"] and "ps_findings.fit_lines(ps_summary)" in cell["ps-section-05"]
    assert 'fits["ping-pong, lsq"][:2]' in cell["ps-section-05"]


def test_run_lab_records_the_load_around_the_launch(monkeypatch):
    # second read, item 11: print the load average and ranks against cores beside "no pass disturbed"
    import types
    from dltutor.allreduce import sweep
    from dltutor.launch import run
    monkeypatch.setattr(run, "launch", lambda *a, **k: types.SimpleNamespace(
        metrics=[{"rank": 0, "results": []}], log_dir="x"))
    summary, _ = sweep.run_lab("allreduce_bench.py", 4, [], echo=False)
    assert set(summary["load"]) == {"before", "after", "cores", "ranks"} and summary["load"]["ranks"] == 4
