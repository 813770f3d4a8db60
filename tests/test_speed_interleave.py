"""dltutor.single.interleave / speed.compare_speed (issue #42): the speed table's variants are timed
in turns, so a slow stretch of a shared machine slows them alike instead of ranking them.

A fake clock stands in for the machine: every training forward of a model advances it by 1 s, or by
3 s while the clock is inside a slow stretch. No test reads the real clock."""
from __future__ import annotations

import multiprocessing
import time

import pytest
import torch
from torch import nn

from dltutor.data import cifar10
from dltutor.single import interleave, speed


class Clocked(nn.Module):
    """A tiny model whose every training forward costs fake seconds: 1, or `slow` x 1 inside [start, end)."""

    def __init__(self, clock, log, name):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 2, 3), nn.Linear(2, 10)
        self.clock, self.log, self.name = clock, log, name

    def forward(self, x):
        c = self.clock
        c["t"] += c["slow"] if c["start"] <= c["t"] < c["end"] else 1.0
        self.log.append(self.name)
        return self.fc(self.conv(x).mean((2, 3)))


def _fake_clock(monkeypatch, start, end, slow=3.0):
    clock = {"t": 0.0, "start": start, "end": end, "slow": slow}
    monkeypatch.setattr(time, "perf_counter", lambda: clock["t"])
    return clock


def _compare(tmp_path, monkeypatch, start, end):
    monkeypatch.setenv(cifar10.OFFLINE_ENV, "1")
    monkeypatch.setenv("DLTUTOR_FASHION_MNIST", "none")
    tr, _, _ = cifar10.load_cifar10(root=tmp_path, train_subset=64, test_subset=10, quiet=True)
    clock, log, made = _fake_clock(monkeypatch, start, end), [], []

    def make_model():   # the variants' models, in the order compare_speed builds them
        made.append(["DataLoader, 0 workers", "data on device", "on device + channels_last"][len(made)])
        return Clocked(clock, log, made[-1])

    rows = speed.compare_speed(make_model, tr, batch_size=16, steps=5, warmup=1, device="cpu",
                               workers=(0,), try_compile=False)
    return {r["variant"]: r for r in rows if r["img_per_s"]}, log


def test_a_slow_stretch_slows_every_variant_alike(tmp_path, monkeypatch):
    """3 variants, 1 warm-up step each (fake 0-3 s), then 5 rounds of one 1-step piece each. The
    machine is 3x slower from 6 s to 24 s: rounds 2 and 3 (1-based), for every variant. Timed one
    after the other (the old order) the whole stretch fell on 'data on device' alone, 3x slower than
    the others, and the table printed that as an effect of keeping the data on the device."""
    by, _ = _compare(tmp_path, monkeypatch, 6.0, 24.0)
    assert len(by) == 3
    expected = 5 * 16 / (3 * 1.0 + 2 * 3.0)      # 5 pieces of 16 images: 3 fast, 2 slow
    for row in by.values():
        assert row["img_per_s"] == pytest.approx(expected)
        assert row["spread"] > 0                  # the slow stretch widens each variant's ±
    assert by["data on device"]["speedup"] == pytest.approx(1.0)


def test_a_stretch_not_on_round_boundaries_stays_inside_the_spreads(tmp_path, monkeypatch):
    """A slow stretch that starts and ends inside rounds hits some variants one piece more than
    others; the gap that leaves is inside their combined ±, so nothing is decided from it."""
    from dltutor.core.spread import combined
    by, _ = _compare(tmp_path, monkeypatch, 7.0, 20.0)
    rows = list(by.values())
    for a in rows:
        for b in rows:
            assert abs(a["img_per_s"] - b["img_per_s"]) <= combined(a["spread"], b["spread"])


def test_rounds_rotate_and_every_variant_is_timed_in_every_round(tmp_path, monkeypatch):
    _, log = _compare(tmp_path, monkeypatch, 1e9, 1e9)
    a, b, c = "DataLoader, 0 workers", "data on device", "on device + channels_last"
    assert log[:3] == [a, b, c]                            # built and warmed up first, in table order
    assert log[3:] == [a, b, c, b, c, a, c, a, b, a, b, c, b, c, a]   # then rounds, order rotated


def _runner(name, clock, log, batches=None):
    batches = batches or [(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))]
    return interleave.Runner(name, Clocked(clock, log, name), batches, "cpu")


def test_each_variants_pieces_come_from_every_round(monkeypatch):
    clock, log = _fake_clock(monkeypatch, 1e9, 1e9), []
    runners = [_runner(n, clock, log) for n in "ABCD"]
    order = interleave.time_in_rounds(runners, steps=10)          # 5 pieces of 2 steps
    assert order == [list("ABCD"), list("BCDA"), list("CDAB"), list("DABC"), list("ABCD")]
    for r in runners:
        got = r.result()
        assert got["rounds"] == [0, 1, 2, 3, 4] and got["steps"] == 10 and got["images"] == 40
        assert got["img_per_s"] == pytest.approx(4.0)             # 4 images per fake second


def test_a_runner_that_fails_is_left_out_of_later_rounds(monkeypatch):
    clock, log = _fake_clock(monkeypatch, 1e9, 1e9), []
    ok, bad = _runner("ok", clock, log), _runner("bad", clock, log)

    def boom(x):
        raise RuntimeError("out of memory")

    bad.model.forward = boom
    interleave.time_in_rounds([ok, bad], steps=3)
    assert isinstance(bad.error, RuntimeError) and bad.rates == []
    assert ok.result()["rounds"] == [0, 1, 2]


def test_worker_processes_start_outside_the_timed_window_and_are_shut_down(monkeypatch):
    """A DataLoader with workers gets fresh ones per piece; their first batch of the piece
    (made while no step ran) is trained untimed, and no worker process outlives the rounds."""
    from torch.utils.data import DataLoader, TensorDataset
    clock, log = _fake_clock(monkeypatch, 1e9, 1e9), []
    before = set(multiprocessing.active_children())
    data = TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 10, (64,)))
    loader = DataLoader(data, batch_size=4, num_workers=1)
    run = _runner("w", clock, log, loader)
    interleave.time_in_rounds([run], steps=3)                    # 3 pieces of 1 step
    got = run.result()
    assert len(log) == 6                                         # 3 untimed first batches + 3 timed
    assert got["images"] == 12 and got["seconds"] == pytest.approx(3.0)
    assert run._it is None and set(multiprocessing.active_children()) <= before


def test_more_pieces_when_asked_each_from_its_own_round(monkeypatch):
    """Notebook 01's full mode cuts each variant's steps into TABLE_PIECES pieces (more than the
    default CHUNKS), so its ± is the CI over that many rounds; compare_speed passes `pieces` on."""
    assert interleave.pieces(12, 6) == [2] * 6 and interleave.pieces(10) == [2] * 5
    clock, log = _fake_clock(monkeypatch, 1e9, 1e9), []
    runners = [_runner(n, clock, log) for n in "AB"]
    order = interleave.time_in_rounds(runners, steps=8, chunks=8)   # 8 pieces of 1 step
    assert len(order) == 8 and order[1] == ["B", "A"]
    assert runners[0].result()["pieces"] == 8 and runners[0].result()["rounds"] == list(range(8))


def test_compare_speed_times_the_pieces_it_is_given(tmp_path, monkeypatch):
    monkeypatch.setenv(cifar10.OFFLINE_ENV, "1")
    monkeypatch.setenv("DLTUTOR_FASHION_MNIST", "none")
    tr, _, _ = cifar10.load_cifar10(root=tmp_path, train_subset=64, test_subset=10, quiet=True)
    clock, log = _fake_clock(monkeypatch, 1e9, 1e9), []
    rows = speed.compare_speed(lambda: Clocked(clock, log, "m"), tr, batch_size=16, steps=8, pieces=8,
                               warmup=1, device="cpu", workers=(0,), try_compile=False)
    timed = [r for r in rows if r["img_per_s"]]
    assert len(timed) == 3 and all(r["pieces"] == 8 for r in timed)
