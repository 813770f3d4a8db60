"""Notebook 01's fast path one knob at a time: the ladder (dltutor.single.ladder), its bench
(bench/bench_time_to_accuracy.py --ladder, run for real on a tiny subset here), and the GPU
record's table and sentences the notebook prints."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from dltutor.core.course import course_root
from dltutor.single import ladder, models, train

ROOT = course_root().parent


def test_on_a_cpu_the_ladder_says_which_knobs_it_cannot_turn():
    cpu = ladder.ladder_on(torch.device("cpu"))
    amp = next(r for r in cpu if r.name == "+ AMP")
    assert not amp.amp and "(not on a CPU: fp32 there)" in amp.knob
    later = cpu[cpu.index(amp) + 1:]
    assert all(not r.amp and "not on a CPU" not in r.knob for r in later)   # said once
    graphs = cpu[-1]
    assert graphs.compile and graphs.compile_mode == "default" and "no CUDA graphs" in graphs.knob
    assert ladder.ladder_on(torch.device("cuda", 0)) == list(ladder.LADDER)   # nothing changed
    names = [r.name for r in ladder.LADDER]
    assert len(set(names)) == len(names) and not ladder.LADDER[0].device_data
    for a, b in zip(ladder.LADDER, ladder.LADDER[1:]):     # each rung adds to the one above
        changed = {k for k in a.__dataclass_fields__ if getattr(a, k) != getattr(b, k)}
        assert changed - {"name", "knob"}, (a.name, b.name)


def test_the_warm_up_starts_at_a_tenth_and_the_cosine_ends_near_zero():
    model = models.cifar_resnet(width=2)
    opt, sched = train.make_optimizer(model, 0.2, total_steps=100, warmup_steps=10)
    lrs = []
    for _ in range(100):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.02) and lrs[10] == pytest.approx(0.2)
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:11])) and lrs[-1] < 0.001
    opt, sched = train.make_optimizer(model, 0.2, total_steps=100)            # no warm-up
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2)


def _run(rung, seed, sec, reached=True, acc=0.91, warm=1.0):
    return dict(rung=rung, knob=f"adds {rung}", seed=seed, batch_size=128, precision="bf16",
                reached=reached, seconds_to_target=sec if reached else None,
                steps_to_target=100 if reached else None, img_per_s=1000.0, final_acc=acc,
                warmup_seconds=warm)


MEASURED = dict(bench="time_to_accuracy_ladder", device="NVIDIA H200", torch="2.11.0+cu130",
                data="Fashion-MNIST", target=0.9, eval_every_images=15_000, train_images=60_000, runs=[
                    _run("base", 0, 20.0), _run("fast data", 0, 10.0), _run("tiny knob", 0, 9.5),
                    _run("graphs", 0, 4.0), _run("graphs", 1, 4.4, warm=0.0),
                    _run("graphs", 2, 3.9, warm=0.0)])


def test_rows_give_each_knob_its_share_of_the_gain():
    rows = ladder.ladder_rows(MEASURED)
    assert [r["rung"] for r in rows] == ["base", "fast data", "tiny knob", "graphs"]
    assert [r["share of the gain"] for r in rows] == ["-", "62%", "3%", "34%"]
    assert rows[0]["s to 90%"] == 20.0
    broken = dict(MEASURED, runs=[_run("base", 0, 20.0), _run("x", 0, 0, reached=False, acc=0.85)])
    rows = ladder.ladder_rows(broken)
    assert rows[1]["s to 90%"] == "not reached (0.850)" and rows[1]["share of the gain"] == "-"


def test_sentences_name_the_card_and_the_record_and_what_is_noise(tmp_path):
    lines = ladder.ladder_sentences(MEASURED, tmp_path / "2026-11-27-node.json")
    assert "On one NVIDIA H200" in lines[0] and "20.0 s" in lines[0] and "4.00 s" in lines[0]
    assert "5.0 x faster" in lines[0] and "record 2026-11-27-node.json" in lines[0]
    assert "'fast data' (62%)" in lines[1] and "every 15,000 training images (0.25 of an epoch)" in lines[1]
    assert "4.00, 4.40, 3.90 s, 13% apart" in lines[2] and "tiny knob is within" in lines[2]
    assert "fast data" not in lines[2]
    broken = dict(MEASURED, runs=[_run("base", 0, 20.0), _run("x", 0, 0, reached=False)])
    assert ladder.ladder_sentences(broken, tmp_path / "r.json") == [
        "On the NVIDIA H200 the target was not reached by: x (NVIDIA H200, torch 2.11.0+cu130; "
        "record r.json)."]


def test_the_newest_record_with_a_ladder_is_found_and_its_absence_said(tmp_path):
    assert "is absent" in ladder.record_ladder(tmp_path / "nope")[1]
    (tmp_path / "2026-01-01-a.json").write_text(json.dumps({"measurements": [MEASURED]}))
    (tmp_path / "2026-02-01-b.json").write_text(json.dumps({"measurements": [{"bench": "other"}]}))
    measured, path = ladder.record_ladder(tmp_path)
    assert path.name == "2026-01-01-a.json" and measured["device"] == "NVIDIA H200"
    (tmp_path / "2026-01-01-a.json").unlink()
    assert "no GPU record with a time-to-accuracy ladder" in ladder.record_ladder(tmp_path)[1]


def test_notebook_01_reads_the_committed_gpu_record():
    measured, path = ladder.record_ladder()
    assert measured is not None, path
    assert path.parent == ROOT / "docs" / "verified" and "NVIDIA" in measured["device"]
    assert ladder.ladder_rows(measured)[-1]["rung"] == ladder.LADDER[-1].name


def test_the_ladder_runs_for_real_from_the_same_first_weights(tmp_path):
    """Three rungs on 512 images (a DataLoader, the data on the device, compiled), the last twice."""
    out = tmp_path / "ladder.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_time_to_accuracy.py"),
                          "--ladder", "--rungs", "1,2,7", "--device", "cpu", "--train-images", "512",
                          "--test-images", "256", "--width", "2", "--target", "0.3",
                          "--eval-every-images", "256", "--warmup-steps", "1", "--repeats", "1",
                          "--cap-s", "30", "--json", str(out)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]
    m = json.loads(out.read_text())
    assert m["bench"] == "time_to_accuracy_ladder" and m["device"] == "CPU" and "partial" not in m
    runs = m["runs"]
    assert [(r["rung"], r["seed"]) for r in runs] == [
        ("DataLoader", 0), ("data on the device", 0), ("+ CUDA graphs", 0), ("+ CUDA graphs", 1)]
    first = {r["first_weights_abs_sum"] for r in runs if r["seed"] == 0}
    assert len(first) == 1 and runs[-1]["first_weights_abs_sum"] not in first
    assert not runs[0]["device_data"] and runs[1]["device_data"] and runs[2]["compiled"]
    assert "no CUDA graphs on a CPU" in runs[2]["knob"] and runs[2]["precision"] == "fp32"
    assert all(r["curve"] and r["eval_seconds"] >= 0 and r["warmup_seconds"] >= 0 for r in runs)
    assert "DLTUTOR_METRICS" in run.stdout
