"""Notebook 07 after the expert read (issue 42): compared set-ups read in interleaved rounds with the
interval over passes, the load average recorded, timelines cut into interleaved pieces, the plots
that misled, and the sentences that said more than the run showed."""
from __future__ import annotations

import math

import pytest

from dltutor.core import spread
from dltutor.core.findings import INCONCLUSIVE
from dltutor.io import bench, plots, rounds, starve
from dltutor.io import findings as F


def _fake_pass(rate, within=1.0):
    return {"samples_per_s": rate, "spread_per_s": within, "seconds": 1.0, "ttfb_s": 0.01, "mb_per_s": 1.0,
            "samples": 10, "resident_before": 0.0, "cache": "cold", "format": "files", "workers": 0}


def test_rounds_rotate_the_order_and_record_the_load():
    seen = []
    passes = rounds.interleaved(["a", "b", "c"], 3, lambda c, r: seen.append(c) or _fake_pass(100))
    assert seen == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]     # no set-up always first
    assert [p["round"] for p in passes] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert all(p["load_before"] >= 0 and p["load_after"] >= 0 for p in passes)   # /proc/loadavg


def test_the_interval_is_over_passes_not_within_one():
    rates = [100.0, 200.0, 150.0]
    it = iter(rates)
    row = rounds.over_passes(rounds.interleaved(["a"], 3, lambda c, r: _fake_pass(next(it))))[0]
    assert row["samples_per_s"] == pytest.approx(150.0)
    assert row["spread_per_s"] == pytest.approx(spread.mean_ci(rates))      # not the within-pass ±1
    assert row["within_spread_per_s"] == 1.0 and row["passes"] == 3 and row["pass_rates"] == rates
    assert row["load_1m"] != "n/a"


def test_sweep_reads_each_set_up_in_turn_and_no_workers_once(monkeypatch):
    calls = []

    def fake(fmt, root, **kw):
        calls.append((kw["workers"], kw["prefetch"], kw["seed"]))
        return dict(_fake_pass(100.0 + len(calls)), workers=kw["workers"],
                    prefetch=kw["prefetch"] if kw["workers"] else "n/a")
    monkeypatch.setattr(bench, "read_share", fake)
    rows = bench.worker_sweep("/nowhere", "files", workers=(0, 2), prefetch=(2, 8), rounds=2, max_batches=3)
    assert calls[:3] == [(0, None, 0), (2, 2, 0), (2, 8, 0)] and calls[3:] == [(2, 2, 1), (2, 8, 1), (0, None, 1)]
    assert [(r["workers"], r["prefetch"], r["passes"]) for r in rows] == [(0, "n/a", 2), (2, 2, 2), (2, 8, 2)]


def test_read_formats_reads_real_passes_in_rounds(tmp_path):
    root = bench.prepare(tmp_path / "r", 64, per_shard=16)
    rows = bench.read_formats(root, fmts=("files", "shards"), batch_size=8, rounds=2, max_batches=2)
    assert [(r["format"], r["asked"]) for r in rows] == [("files", "cold"), ("files", "warm"),
                                                           ("shards", "cold"), ("shards", "warm")]
    assert all(r["passes"] == 2 and r["samples"] == 32 for r in rows)
    assert all(r["resident_before"] > 0.9 for r in rows if r["asked"] == "warm")   # warmed before the pass
    shards = rows[2]
    assert shards["mb_per_s"] * shards["seconds"] < 0.6 * sum(p.stat().st_size for p in (root / "shards").glob("*.tar")) / 1e6


def test_timelines_are_cut_into_interleaved_pieces(tmp_path):
    root = bench.prepare(tmp_path / "r", 64, per_shard=16)
    tl = bench.timelines(root, ["light"], ["memmap/w0", "files/w0"], 4, batch_size=8, threads=1, rounds=2)
    rows = tl["light + memmap/w0"]
    assert [r["step"] for r in rows] == [0, 1, 0, 1] and [r["piece"] for r in rows] == [0, 0, 1, 1]
    assert all(b["start"] >= a["start"] for a, b in zip(rows, rows[1:]))       # one clock over the pieces
    assert starve._steady(rows, True) == [rows[1], rows[3]]                   # each piece's first batch out
    assert all(0.0 <= r["resident_before"] <= 1.0 and "load_1m" in r for r in rows)
    assert starve.summary(tl)[0]["cache"] in ("cold", "warm", "partly cached")


def _steps(waits, compute, first=1.0):
    rows, t = [], 0.0
    for k, w in enumerate([first] + waits):
        rows.append({"step": k, "start": t, "wait_s": w, "compute_s": compute})
        t += w + compute
    return rows


def test_the_table_says_inconclusive_near_the_line():
    near = _steps([0.2, 0.8, 0.3, 0.7], 0.5)                  # share 50 % +- far more than the gap
    row = starve.summary({"light + memmap/w0": near})[0]
    assert row["verdict"] == "on the line (inconclusive)" and row["share_pp"].endswith(" pp")
    assert starve.verdict(_steps([0.9, 0.95, 0.9], 0.1)).startswith("starved")


def test_timeline_draws_no_edges_and_one_axis_per_model():
    tl = {"light + files/w0": _steps([0.01] * 3, 0.002, 0.01), "heavy + files/w0": _steps([0.01] * 3, 0.2, 0.01)}
    fig = plots.plot_timeline(tl)
    left = [ax for ax in fig.axes if ax.collections]
    assert len(left) == 2                                       # light and heavy: own time axes
    assert left[0].get_xlim()[1] < left[1].get_xlim()[1] / 10
    assert all(w == 0 for ax in left for c in ax.collections for w in c.get_linewidths())


def test_formats_bars_are_on_a_linear_axis():
    rows = [dict(_fake_pass(r), cache=c, format=f) for f, r in (("files", 100), ("shards", 86)) for c in ("cold",)]
    fig = plots.plot_formats(rows)
    assert fig.axes[0].get_yscale() == fig.axes[1].get_yscale() == "linear"   # bar heights keep their ratios


def _read(fmt, asked, rate, spread_=1.0, mb=5.0):
    return {"format": fmt, "asked": asked, "cache": asked, "samples_per_s": rate, "spread_per_s": spread_,
            "resident_before": 0.0 if asked == "cold" else 1.0, "workers": 0, "ttfb_s": 0.01, "mb_per_s": mb}


def test_warm_shards_vs_files_is_printed_with_the_reason_and_the_device_named():
    reads = [_read("files", "cold", 3780), _read("files", "warm", 5952), _read("shards", "cold", 3248),
             _read("shards", "warm", 3103)]
    out = F.formats(reads, {"name": "vda", "disk": "vda", "virtual": True})
    assert out[0].startswith("The files are on /dev/vda") and "virtual disk" in out[0]
    warm = next(s for s in out if s.startswith("Warm: shards"))
    assert "shards is 0.52x small files" in warm and "tarfile" in warm


def test_a_cache_effect_inside_the_spread_says_why_and_what_deciding_it_takes():
    reads = [_read("hdf5", "cold", 20000, 3000, mb=16.0), _read("hdf5", "warm", 22600, 3300)]
    line = next(s for s in F.formats(reads) if s.startswith("hdf5:"))
    assert INCONCLUSIVE in line and "still read 16 MB/s from the device, and the warm passes were 1.13x" in line
    assert "shrink 1.7x: about 3x as many passes" in line
    assert F.needed(10.0, 5.0) == "" and F.needed(0.0, 5.0) == "" and F.needed(10.0, math.nan) == ""


def test_workers_slower_than_none_say_the_cores_and_speak_singular():
    sweep = [dict(_read("files", "cold", 3764, 50), prefetch="n/a"),
             dict(_read("files", "cold", 3234, 50), workers=1, prefetch=2, load_1m="7.9-8.4"),
             dict(_read("files", "cold", 2960, 50), workers=1, prefetch=8)]
    out = F.workers(sweep)
    assert out[0].startswith("1 worker 3,234 samples/s vs 0 workers") and "1 workers" not in " ".join(out)
    assert "cores (1-minute load average 7.9-8.4)" in out[0]


def test_steps_notes_follow_the_numbers():
    files0 = _steps([0.014, 0.0141, 0.0139, 0.014], 0.002)
    files2 = _steps([0.030, 0.0301, 0.0299, 0.030], 0.002)
    line = F.pipelines({"light + files/w0": files0, "light + files/w2": files2})[0]
    assert "2 loader worker process(es) and the training process shared" in line
    heavy_files = _steps([0.025, 0.0251, 0.0249, 0.025], 0.185)
    heavy_shards = _steps([0.065, 0.0651, 0.0649, 0.065], 0.218)
    line = F.pipelines({"heavy + files/w0": heavy_files, "heavy + shards/w0": heavy_shards})[0]
    assert "neither run had loader workers" in line
    both = F.starving({"light + files/w0": files0, "heavy + files/w0": heavy_files})[1]
    assert "the share rose although the wait per step fell" in both


def test_passes_count_the_passes_their_own_interval_misses():
    row = {"format": "files", "workers": 1, "prefetch": 2, "cache": "cold", "passes": 4, "place": "local",
           "pass_rates": [100.0, 200.0, 100.0, 200.0], "pass_spreads": [10.0, 10.0, 60.0, 60.0],
           "samples_per_s": 150.0, "spread_per_s": 92.0, "within_spread_per_s": 60.0, "load_1m": "1.0-2.0"}
    out = F.passes([row])
    assert out[0].startswith("files (local), 1 worker, prefetch 2, cold: 4 passes at 100, 200, 100, 200")
    assert out[-1].startswith("2 of 4 passes (50%) lie farther from their set-up's mean")


def test_a_decided_prefetch_gap_is_set_against_the_prediction():
    sweep = [dict(_read("files", "cold", 5819, 473), prefetch="n/a"),
             dict(_read("files", "cold", 3445, 378), workers=1, prefetch=2),
             dict(_read("files", "cold", 4160, 572), workers=1, prefetch=8),
             dict(_read("files", "cold", 3963, 570), workers=2, prefetch=2),
             dict(_read("files", "cold", 3942, 396), workers=2, prefetch=8)]
    out = F.workers(sweep)
    assert "prefetch_factor=8 is 1.21x" in out[1] and "one of this cell's 4 comparisons" in out[1]
    assert INCONCLUSIVE in out[3] and "this cell's" not in out[3]
