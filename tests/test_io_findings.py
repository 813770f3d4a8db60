"""Notebook 07's printed findings (dltutor.io.findings): each sentence follows the numbers each way
(A ahead, B ahead, inside the spread), and the spreads come from the run's own batches and steps."""
from __future__ import annotations

import math

import pytest

from dltutor.core import spread
from dltutor.core.findings import INCONCLUSIVE
from dltutor.io import findings as F
from dltutor.io import measure, starve


def _read(fmt, asked, rate, spread=1.0, cache=None, workers=0, prefetch=2):
    return {"format": fmt, "asked": asked, "cache": cache or asked, "samples_per_s": rate,
            "spread_per_s": spread, "resident_before": 0.0 if asked == "cold" else 1.0,
            "workers": workers, "prefetch": prefetch, "ttfb_s": 0.01 * (1 + workers)}


def _reads(files_cold, shards_cold, spread=1.0):
    return [_read("files", "cold", files_cold, spread), _read("files", "warm", 2000, spread),
            _read("shards", "cold", shards_cold, spread), _read("shards", "warm", 2000, spread),
            _read("memmap", "cold", 9000, spread), _read("memmap", "warm", 10000, spread)]


def test_spreads_are_the_ci_of_the_mean_from_the_run():
    assert math.isnan(measure.rate_spread(100.0, [0.1]))         # one gap: no interval, never ± 0
    assert measure.rate_spread(100.0, [0.1, 0.1, 0.1]) == pytest.approx(0.0, abs=1e-9)  # steady batches
    gaps = [0.1, 0.3]
    assert measure.rate_spread(100.0, gaps) == pytest.approx(100.0 * spread.mean_ci(gaps) / 0.2)
    assert measure.rate_spread(100.0, gaps * 10) < measure.rate_spread(100.0, gaps) / 4   # more batches: narrower
    rows = [{"wait_s": 9.0, "compute_s": 1.0}] + [{"wait_s": w, "compute_s": 1.0} for w in (1.0, 3.0)]
    assert starve.share_spread(rows) == pytest.approx(spread.mean_ci([0.5, 0.75]))   # Student t, step 0 out
    assert starve.wait_ms_spread(rows) == pytest.approx(spread.mean_ci([1e3, 3e3]))
    assert math.isnan(starve.share_spread(rows[:2]))                # one steady step: no interval


def test_formats_cold_shards_vs_files_each_way():
    ahead = F.formats(_reads(files_cold=500, shards_cold=1500))
    assert ahead[0] == ("Cold: shards 1,500 samples/s vs small files 500 samples/s: shards is 3.00x small "
                        "files (the gap, 1,000 samples/s, is larger than their 95 % intervals, ±1 and ±1, combined: ±1.41).")
    behind = F.formats(_reads(files_cold=1500, shards_cold=500))
    assert "shards is 0.33x small files" in behind[0]
    tie = F.formats(_reads(files_cold=1000, shards_cold=1100, spread=80))
    assert INCONCLUSIVE in tie[0]
    assert any(s.startswith("Warm: memmap 10,000 samples/s vs small files (PNG) 2,000") for s in ahead)
    assert "files: warm 2,000 samples/s vs cold 500" in " ".join(ahead)


def test_formats_flags_a_pass_that_was_not_what_it_asked_for():
    rows = _reads(500, 1500)
    rows[0] = _read("files", "cold", 500, cache="partly cached")
    assert "The cold passes of files found 0% of its files in RAM on average (partly cached)" in F.formats(rows)[-1]
    assert not any("found" in s for s in F.formats(_reads(500, 1500)))


def _sweep(w2_rate, pf8_rate, spread=1.0):
    return [_read("files", "cold", 1000, spread, workers=0, prefetch="n/a"),
            _read("files", "cold", w2_rate, spread, workers=2, prefetch=2),
            _read("files", "cold", pf8_rate, spread, workers=2, prefetch=8)]


def test_workers_each_way():
    more = F.workers(_sweep(2000, 2000))
    assert more[0].startswith("2 workers 2,000 samples/s vs 0 workers 1,000 samples/s: 2 workers is 2.00x")
    assert INCONCLUSIVE not in more[0]
    fewer = F.workers(_sweep(500, 500))
    assert "2 workers is 0.50x 0 workers" in fewer[0]
    noisy = F.workers(_sweep(1050, 2000, spread=100))
    assert INCONCLUSIVE in noisy[0]
    assert "prefetch_factor=8 2,000 samples/s vs prefetch_factor=2 1,050" in noisy[1] and INCONCLUSIVE not in noisy[1]
    assert noisy[-1] == "Time to the first batch (mean over passes): 10 ms with 0 workers, 30 ms with 2 workers."


def _rank(rank, mode, rate, once=True, spread=1.0):
    return {"rank": rank, "mode": mode, "samples": 256, "samples_per_s": rate, "spread_per_s": spread,
            "exactly_once": once, "format": "shards"}


def test_sharding_each_way():
    out = F.sharding([_rank(0, "file-level shards", 900), _rank(1, "file-level shards", 1100),
                      _rank(0, "DistributedSampler", 300), _rank(1, "DistributedSampler", 500)])
    assert out[0] == "file-level shards: samples per rank 256, 256; every sample read exactly once."
    assert "file-level shards (shards) 1,000 samples/s ±0.707 vs DistributedSampler (shards) 400" in out[2]
    assert "not decided by one pass" in out[2] and "2.50x" not in out[2]     # one pass per rank decides nothing
    out = F.sharding([_rank(0, "file-level shards", 300, once=False), _rank(0, "DistributedSampler", 320, spread=30)])
    assert "NOT every sample exactly once" in out[0] and INCONCLUSIVE in out[2]


def _staged(local, shared, same, break_even=None):
    return {"format": "files", "break_even_epochs": break_even,
            "copy": {"mb": 1.0, "seconds": 0.5, "src": "/a", "dst": "/b", "same_device": same},
            "local": {"samples_per_s": local, "spread_per_s": 1.0},
            "shared": {"samples_per_s": shared, "spread_per_s": 1.0}}


def test_staging_each_way():
    same = F.staging(_staged(1200, 1000, same=True))
    assert "local is 1.20x shared" in same[1] and "SAME device" in same[2]
    pays = F.staging(_staged(2000, 1000, same=False, break_even=3.25))
    assert "local is 2.00x shared" in pays[1] and pays[2].startswith("Staging pays off after 3.2 epochs")
    never = F.staging(_staged(900, 1000, same=False))
    assert "local is 0.90x shared" in never[1] and never[2].startswith("Staging never pays off")


def _steps(wait_ms, compute_ms, n=6, jitter=0.0):
    return [{"step": k, "start": 0.0, "wait_s": (wait_ms + (jitter if k % 2 else -jitter)) / 1e3,
             "compute_s": compute_ms / 1e3} for k in range(n)]


def test_starving_light_starved_heavy_fed_and_the_reverse():
    tl = {"light + files/w0": _steps(9, 1), "light + memmap/w0": _steps(1, 9),
          "heavy + files/w0": _steps(1, 9), "heavy + memmap/w0": _steps(1, 99)}
    out = F.starving(tl)
    assert out[0].startswith("files/w0: wait share (pp: percentage points) light 90% vs heavy 10%: light is 9.00x heavy")
    assert out[1].startswith("files/w0, light vs heavy: wait per step 9 ms vs 1 ms (9x)")   # absolute wait too
    assert "light model: starved (wait > 50% of the step) on 1 of 2 pipelines (files/w0)" in out[4]
    assert "heavy model: starved (wait > 50% of the step) on 0 of 2 pipelines" in out[5]
    assert out[-1] == "The same pipeline starved one model and fed another: files/w0."
    tl = {"light + files/w0": _steps(1, 9), "heavy + files/w0": _steps(9, 1)}
    assert "light is 0.11x heavy" in F.starving(tl)[0]


def test_starving_inside_the_spread_is_inconclusive():
    tl = {"light + files/w0": _steps(5, 5, jitter=4), "heavy + files/w0": _steps(4, 6, jitter=4)}
    out = F.starving(tl)
    assert INCONCLUSIVE in out[0]
    assert "within the spread of the 50 % line (inconclusive here) for files/w0" in out[2]
    assert out[-1] == "No pipeline here clearly starved one model and fed another."


def test_exercise_prints_what_was_measured():
    tl = {"mlp + files/w0": _steps(8, 2), "mlp + memmap/w0": _steps(0.2, 2)}
    out = F.exercise(tl)
    assert out[0].startswith("mlp + files/w0: on average a batch arrived after 8 ms of waiting, the step computed 2 ms "
                             "(means over 5 steps); wait share 80% ± 0 pp")
    assert out[0].endswith("-> starved.") and out[1].endswith("-> fed.")
    assert out[-1] == "Starved in this run: mlp + files/w0."
    assert F.exercise({"mlp + files/w0": _steps(0.2, 2)})[-1] == "Starved in this run: none."


# ---------------------------------------------------------------- issue 42: sentences that are true
def test_sizes_report_allocated_space_beside_the_apparent_bytes(tmp_path):
    from dltutor.io import bench
    root = bench.prepare(tmp_path / "r", 40, per_shard=10)
    rows = {r["format"]: r for r in bench.sizes(root)}
    files = sorted((root / "files").rglob("*.png"))
    assert rows["files"]["apparent_mb"] == pytest.approx(sum(p.stat().st_size for p in files) / 1e6)
    assert rows["files"]["allocated_mb"] == pytest.approx(sum(p.stat().st_blocks * 512 for p in files) / 1e6)
    assert rows["files"]["allocated_mb"] > rows["files"]["apparent_mb"]      # each small PNG takes a block
    line = F.sizes([{"format": "files", "files": 10000, "apparent_mb": 5.04, "allocated_mb": 41.4}])[0]
    assert line == ("files: 10,000 file(s) hold 5.04 MB and take 41.4 MB on the device (8.21x; "
                    "4.1 kB allocated per file).")


def test_warm_slower_than_cold_is_never_an_effect():
    rows = _reads(500, 1500)
    rows[5] = _read("memmap", "warm", 4464, spread=300)       # warm after cold 9000 +- 1
    line = next(s for s in F.formats(rows) if s.startswith("memmap:"))
    assert "warm is" not in line and "which a page cache cannot cause" in line and INCONCLUSIVE in line
    assert any(s.startswith("files: warm 2,000 samples/s vs cold 500") and "warm is 4.00x" in s
               for s in F.formats(rows))                     # a faster warm pass is still said


def _pass(rate, seconds, spread, workers=0, prefetch=2):
    return {"format": "files", "how": "shuffled", "workers": workers, "prefetch": prefetch, "batch_size": 128,
            "cache": "cold", "samples_per_s": rate, "seconds": seconds, "spread_per_s": spread}


def test_repeats_compare_the_sections_means():
    out = F.repeats([_pass(7521, 1.3, 300), _pass(4464, 2.2, 480), _pass(4464, 2.2, 480),
                     _pass(3000, 3.0, 10, workers=1, prefetch=2), _pass(6000, 1.5, 10, workers=1, prefetch=8)])
    assert len(out) == 1                                      # prefetch 2 and 8 are not repeats
    assert out[0].startswith("files (shuffled, 0 workers, batch 128, cold) was measured in 2 sections: "
                             "7,521 samples/s ±300, 4,464 samples/s ±480. They lie 3,057 samples/s (68%) apart")
    assert "conditions changed between sections" in out[0] and "is not measured" in out[0]
    agree = F.repeats([_pass(1000, 1.0, 50), _pass(1050, 1.1, 50)])[0]
    assert "they agree within their intervals" in agree
    assert F.repeats([_pass(1000, 1.0, 50)])[0].startswith("No configuration was measured in more than one")


def test_sharding_over_two_formats_is_no_verdict_on_sharding():
    rows = [dict(_rank(0, "file-level shards", 1350), format="shards"),
            dict(_rank(0, "DistributedSampler", 1000), format="files")]
    line = F.sharding(rows)[-1]
    assert "file-level shards (shards) 1,350 samples/s ±1 vs DistributedSampler (files)" in line
    assert "mixes the format with the way of sharding" in line and "no verdict on sharding" in line
    same = [dict(r, format="shards") for r in rows]
    assert "mixes" not in F.sharding(same)[-1]


def test_wait_is_compared_in_ms_not_only_as_a_share():
    tl = {"heavy + files/w0": _steps(16, 109), "heavy + shards/w0": _steps(19, 63)}
    line = F.pipelines(tl)[0]
    assert line.startswith("heavy, shards/w0 vs files/w0: wait per step 19 ms vs 16 ms (1.19x), compute 63 ms "
                           "vs 109 ms (0.578x), wait share")
    assert "the same model computed 0.578x as long per step here" in line
    tl = {"light + files/w0": _steps(7, 0.5), "heavy + files/w0": _steps(16, 109)}
    out = F.starving(tl)
    both = next(s for s in out if s.startswith("files/w0, light vs heavy: wait per step 7 ms vs 16 ms (0.438x)"))
    assert "the share rose although the wait per step fell; the compute was 0.00459x as long, so the share " \
           "alone misreads the pipeline" in both
    assert "same model" not in both


def test_a_pass_without_an_interval_decides_nothing():
    out = F.formats(_reads(files_cold=1000, shards_cold=3000, spread=float("nan")))
    assert INCONCLUSIVE in out[0] and "no interval" in out[0]
    rep = F.repeats([_pass(1000, 1.0, float("nan")), _pass(3000, 0.4, 10)])[0]
    assert INCONCLUSIVE in rep and "agree" not in rep and "not an effect" not in rep


def test_mean_over_ranks_combines_the_rank_intervals():
    # two ranks ±40 each: the mean's ± is sqrt(40² + 40²) / 2 = 28.3, not the larger 40 (gap 50 > 40 combined; < 56.6)
    out = F.sharding([_rank(0, "file-level shards", 1000, spread=40), _rank(1, "file-level shards", 1000, spread=40),
                      _rank(0, "DistributedSampler", 950, spread=40), _rank(1, "DistributedSampler", 950, spread=40)])
    assert "file-level shards (shards) 1,000 samples/s ±28.3 vs DistributedSampler (shards) 950 samples/s ±28.3" in out[2]
