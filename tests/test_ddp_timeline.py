"""One DDP step as a timeline (dltutor.ddp.timeline): interval arithmetic on synthetic events with
a known overlap, then lab 02 profiled for real on 2 gloo ranks (`--profile-steps`)."""
import importlib.util
from pathlib import Path

import pytest

from dltutor.ddp import findings, timeline
from dltutor.launch.run import launch

LAB = Path(__file__).resolve().parents[1] / "course" / "labs" / "02_ddp" / "train.py"


def ev(name, start, end, thread=1):
    return {"name": name, "thread": thread, "device": "CPU", "start": start, "end": end}


def test_union_length_and_overlap():
    assert timeline.union([(5, 7), (0, 2), (1, 3), (3, 4)]) == [(0, 4), (5, 7)]
    assert timeline.length([(0, 2), (1, 3), (10, 11)]) == 4
    assert timeline.overlap_length([(0, 10)], [(2, 4), (3, 5), (8, 12)]) == 5
    assert timeline.overlap_length([(0, 1)], [(1, 2)]) == 0


def synthetic_step(t0, comm):
    """A step of 100 us: forward 0-30, backward ops 30-50 and 50-80 (a gap at 50 is none), the
    optimizer 90-95 and all-reduce spans `comm` on gloo's thread, all relative to t0."""
    return [ev(timeline.STEP, t0, t0 + 100), ev(timeline.FORWARD, t0, t0 + 30),
            ev(timeline.BACKWARD + " ConvolutionBackward0", t0 + 30, t0 + 50),
            ev(timeline.BACKWARD + " AddmmBackward0", t0 + 50, t0 + 80),
            ev(timeline.BACKWARD + " on another thread", t0 + 85, t0 + 99, thread=7),
            ev("Optimizer.step#SGD.step", t0 + 90, t0 + 95)] + [
        ev("gloo:all_reduce", t0 + s, t0 + e, thread=3) for s, e in comm]


def test_breakdown_with_a_known_overlap():
    # buckets 60-70 (inside backward) and 75-85 (half inside): 15 of 20 us overlapped
    events = synthetic_step(1000, [(60, 70), (75, 85)]) + synthetic_step(2000, [(80, 90)])
    parts = timeline.step_parts(events)
    assert len(parts) == 2
    b = timeline.breakdown(parts[0])
    assert b["t_iter_ms"] == pytest.approx(0.1) and b["t_forward_ms"] == pytest.approx(0.03)
    assert b["t_backward_ms"] == pytest.approx(0.05) and b["t_comm_ms"] == pytest.approx(0.02)
    assert b["t_overlap_ms"] == pytest.approx(0.015) and b["overlap_fraction"] == pytest.approx(0.75)
    assert b["buckets"] == 2 and b["t_other_ms"] == pytest.approx(0.1 - (0.03 + 0.05 + 0.02 - 0.015))
    assert timeline.breakdown(parts[1])["overlap_fraction"] == 0.0   # all-reduce after backward


def test_subtract():
    assert timeline.subtract([(0, 10)], [(2, 3), (5, 7)]) == [(0, 2), (3, 5), (7, 10)]
    assert timeline.subtract([(0, 10), (20, 30)], [(8, 22)]) == [(0, 8), (22, 30)]
    assert timeline.subtract([(0, 4)], [(0, 4)]) == []


def test_a_blocking_allreduce_launch_is_not_backward():
    # the last backward op (50-80) hands its bucket to gloo inside c10d::allreduce_ (62-80), so
    # backward computes until 62 only and the all-reduce (65-85) overlaps none of it
    events = synthetic_step(0, [(65, 85)]) + [ev(timeline.LAUNCH, 62, 80)]
    b = timeline.breakdown(timeline.step_parts(events)[0])
    assert b["t_backward_ms"] == pytest.approx(0.032) and b["t_overlap_ms"] == 0.0
    assert b["overlap_fraction"] == 0.0


def test_breakdown_without_forward_event_and_without_comm():
    events = [e for e in synthetic_step(0, []) if e["name"] != timeline.FORWARD]
    b = timeline.breakdown(timeline.step_parts(events)[0])
    assert b["t_forward_ms"] == pytest.approx(0.03)   # the step's start up to backward
    assert b["t_comm_ms"] == 0 and b["overlap_fraction"] == 0.0


def test_run_rows_reads_saved_files(tmp_path):
    rec = timeline.Recorder(1, 1, tmp_path)
    rec.events = synthetic_step(0, [(40, 60)])
    path = rec.save(0)
    rows = timeline.run_rows("small buckets", [path, path])
    assert [(r["rank"], r["step"]) for r in rows] == [(0, 0), (1, 0)]
    assert rows[0]["overlap_fraction"] == pytest.approx(1.0) and rows[0]["label"] == "small buckets"
    assert timeline.Recorder(0, 1, tmp_path).save(0) is None


def test_recorder_window():
    rec = timeline.Recorder(2, 3, None)
    assert [k for k in range(8) if rec.active(k)] == [3, 4]
    assert not any(timeline.Recorder(0, 0, None).active(k) for k in range(4))


def test_lab_refuses_profile_steps_without_a_dir():
    spec = importlib.util.spec_from_file_location("lab02_args", LAB)
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    with pytest.raises(SystemExit):
        lab.parse_args(["--profile-steps", "2"])


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """Lab 02 on 2 gloo ranks, tiny model, small buckets: 6 steps, the last 2 profiled."""
    out = tmp_path_factory.mktemp("ddp_timeline")
    res = launch(LAB, nproc=2, threads=1, timeout=150, echo=False, log_dir=out / "logs",
                 args=["--tiny", "--steps", "6", "--bucket-cap-mb", "0.05", "--profile-steps", "2",
                       "--profile-dir", str(out / "profile")])
    return res


def test_profiled_lab_run_gives_a_timeline(profiled):
    files = profiled.metric("profile")
    assert [Path(f).name for f in files] == ["profile.rank0.json", "profile.rank1.json"]
    for m in profiled.metrics:  # 6 steps: 2 left out as warm-up, 2 profiled, 2 timed
        assert len(m["step_times_ms"]) == 2
    rows = timeline.run_rows("0.05 MB", files)
    assert len(rows) == 4
    for r in rows:
        assert r["t_forward_ms"] > 0 and r["t_backward_ms"] > 0 and r["t_comm_ms"] > 0
        assert r["buckets"] >= 2, "0.05 MB buckets: several all-reduces per step"
        assert 0.0 <= r["overlap_fraction"] <= 1.0 + 1e-9
        assert r["t_forward_ms"] + r["t_backward_ms"] <= r["t_iter_ms"] + 1e-6
    parts = timeline.step_parts(timeline.load(files[0]))[0]
    assert parts["forward"][0][1] <= parts["backward"][0][0], "forward ends before backward"
    table = findings.overlap_table(rows)
    assert table[0]["samples"] == 4 and "0.05 MB" in " ".join(findings.overlap(table))
