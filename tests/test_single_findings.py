"""Notebook 01's findings: each sentence follows the numbers (either variant / batch size can win,
or the spreads cover the gap and it says so), and the throughput's spread is measured."""
from __future__ import annotations

import math

import pytest
import torch

from dltutor.core.findings import INCONCLUSIVE, accuracy_halfwidth, half_range
from dltutor.core.spread import mean_ci
from dltutor.single import findings as sf
from dltutor.single import models, speed
from dltutor.single.train import History


@pytest.fixture(autouse=True)
def full_mode(monkeypatch):
    monkeypatch.setenv("DLTUTOR_FAST", "0")


def rows(w0, w2, dev, cl, spread=1.0):
    out = [{"variant": "DataLoader, 0 workers", "img_per_s": w0, "spread": spread, "status": "ok"},
           {"variant": "DataLoader, 2 workers", "img_per_s": w2, "spread": spread, "status": "ok"},
           {"variant": "data on device", "img_per_s": dev, "spread": spread, "status": "ok"},
           {"variant": "on device + channels_last", "img_per_s": cl, "spread": spread, "status": "ok"},
           {"variant": "on device + AMP (bf16)", "img_per_s": None, "status": speed.NOT_TIMED_ON_CPU}]
    return out


def test_speed_names_the_fastest_and_each_knob_against_what_it_changes():
    out = sf.speed(rows(100.0, 150.0, 200.0, 300.0))
    assert out[0].startswith("Fastest here: on device + channels_last (300 img/s), ahead of every")
    assert "DataLoader, 2 workers is 1.50x DataLoader, 0 workers" in out[1]
    assert "data on device is 2.00x DataLoader, 0 workers" in out[2]
    assert "on device + channels_last is 1.50x data on device" in out[3]   # against on-device, not row 0
    assert out[-1] == f"Not measured in this run: on device + AMP (bf16): {speed.NOT_TIMED_ON_CPU}."
    slow = sf.speed(rows(300.0, 150.0, 200.0, 100.0))
    assert slow[0].startswith("Fastest here: DataLoader, 0 workers")
    assert "DataLoader, 2 workers is 0.50x" in slow[1] and "channels_last is 0.50x data on device" in slow[3]


def test_speed_says_inconclusive_inside_the_spreads():
    out = sf.speed(rows(100.0, 102.0, 101.0, 103.0, spread=5.0))
    assert INCONCLUSIVE in out[0] and "ahead of" not in out[0]
    assert all(INCONCLUSIVE in s for s in out[1:4])


def test_speed_says_fast_mode_and_handles_nothing_measured(monkeypatch):
    assert sf.speed([{"variant": "x", "img_per_s": None, "status": "failed"}]) == ["No variant was measured."]
    monkeypatch.setenv("DLTUTOR_FAST", "1")
    assert sf.speed(rows(1.0, 2.0, 3.0, 4.0))[0].startswith("FAST MODE")


def history(loss, acc):
    h = History()
    for i, (l, a) in enumerate(zip(loss, acc)):   # fit counts epochs from 0
        h.append(epoch=i, train_loss=l, train_acc=a, test_loss=l, test_acc=a, img_per_s=1.0, seconds=1.0)
    return h


def test_curves_each_way():
    learnt = sf.curves(history([2.0, 1.5, 1.0], [0.30, 0.50, 0.70]), n_test=10_000)
    assert "training loss falls as epoch grows: 2 at epoch=1," in learnt[0]   # epochs from 1
    assert "test accuracy after epoch 3 70% vs after epoch 1 30%: test accuracy after epoch 3 is 2.33x" in learnt[1]
    assert "final test accuracy 70% vs guessing 10%: final test accuracy is 7.00x guessing" in learnt[2]
    worse = sf.curves(history([1.0, 1.5], [0.70, 0.30]), n_test=10_000)
    assert "rises" in worse[0] and "is 0.43x" in worse[1]
    small = sf.curves(history([2.3, 2.29], [0.11, 0.12]), n_test=100)   # ±0.06 on 100 images
    assert INCONCLUSIVE in small[1] and INCONCLUSIVE in small[2]
    assert accuracy_halfwidth(0.5, 100) == pytest.approx(0.098)


def test_batch_sizes_each_way_and_without_spreads():
    big = sf.batch_sizes({16: 100.0, 64: 200.0, 256: 300.0}, {16: 1.0, 64: 1.0, 256: 1.0})
    assert big[0] == "Fastest batch size here: 256 (300 img/s)." and "batch 256 is 1.50x batch 64" in big[1]
    assert len(big) == 2
    small = sf.batch_sizes({16: 300.0, 64: 200.0, 256: 100.0}, {16: 1.0, 64: 1.0, 256: 1.0})
    assert small[0].startswith("Fastest batch size here: 16")
    tie = sf.batch_sizes({16: 300.0, 64: 298.0}, {16: 5.0, 64: 5.0})
    assert INCONCLUSIVE in tie[1]
    bare = sf.batch_sizes({16: 300.0, 64: 200.0})
    assert "no spread" in bare[-1]
    assert INCONCLUSIVE in bare[1] and "no interval" in bare[1]     # no ± is not a ± of 0


def test_measure_throughput_reports_the_95_ci_of_its_chunks(monkeypatch):
    """Issue #42: the ± is the 95 % CI of the mean chunk rate (`core.spread.mean_ci`), not half the
    range of the chunks. A fake clock makes the 4 chunks take 1, 2, 1, 2 s: rates 4, 2, 4, 2 img/s,
    half range 1.0, 95 % CI t(0.975, 3) x s / 2 = 1.84."""
    ticks = iter([0.0, 1.0, 3.0, 4.0, 6.0, 6.0])
    monkeypatch.setattr(speed.time, "perf_counter", lambda: next(ticks))
    batches = [(torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,)))]
    got = speed.measure_throughput(models.cifar_resnet(width=4, blocks=(1, 1)), batches, steps=4,
                                   warmup=1, device="cpu")
    assert got["images"] == 16 and got["img_per_s"] == pytest.approx(16 / 6)
    assert got["spread"] == pytest.approx(mean_ci([4.0, 2.0, 4.0, 2.0])) == pytest.approx(1.837, abs=1e-3)
    assert got["spread"] != pytest.approx(half_range([4.0, 2.0, 4.0, 2.0]))
    table = speed.speed_table([{"variant": "v", "img_per_s": got["img_per_s"], "spread": got["spread"],
                                "speedup": 1.0, "status": "ok"}])
    assert "± (95 % CI)" in table and "half range" not in table


def test_more_chunks_shrink_the_ci_and_one_chunk_gives_none(monkeypatch):
    """The same per-chunk variation over more chunks narrows the ± (a half range would not); a
    single chunk has no interval (nan) and its comparison says so instead of deciding."""
    def spread_of(durations):
        clock = [0.0]
        for d in durations:
            clock.append(clock[-1] + d)
        ticks = iter(clock + [clock[-1]])
        monkeypatch.setattr(speed.time, "perf_counter", lambda: next(ticks))
        batches = [(torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)))]
        return speed.measure_throughput(models.cifar_resnet(width=4, blocks=(1, 1)), batches,
                                        steps=len(durations), warmup=0, device="cpu")["spread"]
    few, many = spread_of([1.0, 2.0]), spread_of([1.0, 2.0, 1.0, 2.0, 1.0])
    assert many < few / 3
    one = spread_of([1.0])
    assert math.isnan(one)
    line = sf.speed(rows(100.0, 300.0, 200.0, 250.0, spread=math.nan))
    assert all(INCONCLUSIVE in s and "no interval" in s for s in line[1:4])
    no_key = [{k: v for k, v in r.items() if k != "spread"} for r in rows(100.0, 300.0, 200.0, 250.0)]
    assert INCONCLUSIVE in sf.bottleneck(no_key)     # a row without a ± is never read as ± 0


def test_notebook_01_prints_each_finding():
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/01_single_gpu_cifar10.ipynb",
                       as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for call in ("single_findings.curves(", "single_findings.speed("):
        assert f"findings.show({call}" in code, f"notebook 01 should print {call}...)"
    assert code.count("[single_findings.bottleneck(rows)]") == 2, "notebook 01 should print the bottleneck"
    # the batch-size exercise: its check re-measures and prints the ranking with its spreads
    # (dltutor.single.exercise), for the student's code and for the course's solution
    for call in ("batch_exercise.check(measure,", "batch_exercise.check_solution(setup)"):
        assert call in code, f"notebook 01 should run {call}...)"


def test_bottleneck_is_the_share_of_a_step_that_preparing_the_batches_took():
    """Issue #42's expert read: "data on device beat 0 workers" only shows the preparation costs
    something. With 0 workers preparation and compute run in series, so the share it took is
    1 - rate(0 workers) / rate(on device); the verdict follows which side of one half it is on."""
    pipeline = sf.bottleneck(rows(100.0, 1796.0, 900.0, 950.0))     # 9x faster: 89 % preparation
    assert "took about 89% of the time per image" in pipeline
    assert pipeline.endswith("Bottleneck in this run: the input pipeline.")
    compute = sf.bottleneck(rows(775.0, 656.0, 856.0, 1026.0, spread=20.0))   # notebook 01's run
    assert "took about 9% of the time per image" in compute
    assert "Bottleneck in this run: the model's compute" in compute and "not the limit" in compute
    unsure = sf.bottleneck(rows(775.0, 656.0, 856.0, 1026.0, spread=80.0))    # 9 % ± 13
    assert "model's compute" in unsure and "costs something" not in unsure
    assert "inside the interval" in unsure
    tie = sf.bottleneck(rows(100.0, 102.0, 200.0, 203.0, spread=40.0))    # 50 % ± a lot
    assert INCONCLUSIVE in tie and "Bottleneck in this run" not in tie
    missing = sf.bottleneck([r for r in rows(1.0, 2.0, 3.0, 4.0) if "0 workers" not in r["variant"]])
    assert "not known" in missing


def test_notebook_01_says_what_it_did_not_measure_and_what_is_a_heuristic():
    """Issue #42: CPU bf16 autocast exists (the AMP row is not timed on a CPU, it does not "need a
    GPU"); the LR-with-batch rule is Goyal et al.'s heuristic; the bottleneck may be undecided."""
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/01_single_gpu_cifar10.ipynb",
                       as_version=4)
    text = " ".join(" ".join(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    assert "needs a GPU" not in text and "timed on a GPU only" in text and "fp32" in text
    assert "has to grow with the batch size" not in text
    assert "linear scaling rule* (Goyal et al., 2017)" in text and "rule of thumb" in text
    assert "that this run did not decide it" in text


def test_notebook_01_says_what_pm_means_where_the_student_first_meets_it():
    """Issue #42: the speed table (cell "What to look for") is where the course first shows "±": it
    says there that ± is the 95 % CI of the mean, and no cell calls it a half range any more."""
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/01_single_gpu_cifar10.ipynb",
                       as_version=4)
    srcs = [" ".join(c.source.split()) for c in nb.cells]
    first = next(i for i, s in enumerate(srcs) if "±" in s)
    assert srcs[first].startswith("**What to look for.**")
    assert 'What "±" means' in srcs[first] and "95 % confidence interval" in srcs[first]
    assert "not how much one piece varies" in srcs[first]
    text = " ".join(srcs)
    assert "half the range" not in text and "half range" not in text and "min-max" not in text


def test_an_undecided_knob_says_how_many_pieces_would_decide_it():
    """Issue #42: a knob the full run cannot decide says why, from the run's numbers: the pieces
    that would bring the combined ± under the gap if the noise stayed (± narrows as 1/sqrt(n))."""
    assert sf.pieces_needed(10.0, 20.0, 24) == 96 and sf.pieces_needed(10.0, 11.0, 24) == 30
    assert sf.pieces_needed(0.0, 5.0, 24) is None and sf.pieces_needed(5.0, math.nan, 24) is None
    r = [{**row, "pieces": 24} for row in rows(100.0, 102.0, 101.0, 103.0, spread=5.0)]
    out = sf.speed(r)
    # 2 workers vs 0: gap 2, combined ±7.07: (7.07 / 2)^2 x 24 = 300 pieces, far more than 24
    assert "about 300 pieces per variant instead of 24 (" in out[1]
    assert "smaller than what its noise lets a notebook run decide" in out[1]
    near = sf.speed([{**row, "pieces": 24} for row in rows(100.0, 106.0, 101.0, 103.0, spread=5.0)])
    assert "about 34 pieces per variant instead of 24" in near[1] and "smaller than" not in near[1]
    decided = sf.speed([{**row, "pieces": 24} for row in rows(100.0, 150.0, 200.0, 300.0)])
    assert not any("pieces per variant" in s for s in decided)


def test_the_final_accuracy_is_shown_with_its_interval_against_90_percent():
    """Issue #42: full CPU mode trains to >= 90 % on Fashion-MNIST; the finding prints the final
    accuracy with its 95 % binomial interval and whether 90 % lies below it."""
    above = sf.curves(history([1.0, 0.3], [0.85, 0.92]), n_test=10_000)[-1]
    assert above.startswith("Final test accuracy 92.0 % ± 0.5 % (95 % binomial interval on 10,000")
    assert above.endswith("above 90%, beyond its interval.")
    near = sf.accuracy_goal(history([1.0], [0.903]), n_test=10_000)     # ± 0.58 holds 90 %
    assert INCONCLUSIVE in near
    assert sf.accuracy_goal(history([1.0], [0.80]), n_test=512).endswith("below 90%, beyond its interval.")


def test_notebook_01_full_cpu_mode_trains_on_all_of_fashion_mnist(monkeypatch):
    """Issue #42: full CPU mode uses all 60,000 training and 10,000 test images, a width-16 ResNet,
    and times the speed table in more pieces than the default; the GPU branch keeps CIFAR-10's sizes."""
    from pathlib import Path

    import nbformat
    from dltutor.single import interleave
    nb = nbformat.read(Path(__file__).resolve().parents[1] / "course/notebooks/01_single_gpu_cifar10.ipynb",
                       as_version=4)
    cell = next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    for gpu, want in ((False, dict(TRAIN_IMAGES=60_000, TEST_IMAGES=10_000, WIDTH=16, WORKERS=0)),
                      (True, dict(TRAIN_IMAGES=50_000, TEST_IMAGES=10_000, WIDTH=64, EPOCHS=15))):
        monkeypatch.setattr(torch.cuda, "is_available", lambda gpu=gpu: gpu)
        names = {}
        exec(cell, names)
        assert {k: names[k] for k in want} == want
        assert names["TABLE_PIECES"] > interleave.CHUNKS and names["TABLE_STEPS"] >= 4 * names["TABLE_PIECES"]
    monkeypatch.setenv("DLTUTOR_FAST", "1")
    exec(cell, names)
    assert names["TABLE_STEPS"] == 4 and names["TABLE_PIECES"] == 4 and names["TRAIN_IMAGES"] == 1_024
