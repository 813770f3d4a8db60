"""dltutor.single.train / dltutor.single.speed and lab 01: learning, exact resume, throughput rows, the lab end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from dltutor.data import cifar10, loaders
from dltutor.single import models
from dltutor.single import speed
from dltutor.single import train

LAB = os.path.join(os.path.dirname(__file__), "..", "course", "labs", "01_cifar10", "train.py")


def _tiny():
    return models.cifar_resnet(width=8, blocks=(1, 1))


def _synthetic(tmp_path, n_train, n_test, monkeypatch):
    monkeypatch.setenv(cifar10.OFFLINE_ENV, "1")
    monkeypatch.setenv("DLTUTOR_FASHION_MNIST", "none")   # neither CIFAR-10 nor Fashion-MNIST
    return cifar10.load_cifar10(root=tmp_path, train_subset=n_train, test_subset=n_test, quiet=True)


def test_train_steps_lower_the_loss():
    torch.manual_seed(0)
    model = _tiny()
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    opt = train.default_optimizer(model, lr=0.05)
    batches = [(x, y)] * 8
    first = train.train_epoch(model, batches[:1], opt, "cpu")["loss"]
    out = train.train_epoch(model, batches, opt, "cpu")
    assert len(out["step_loss"]) == 8 and out["images"] == 256 and out["img_per_s"] > 0
    assert out["step_loss"][-1] < first - 0.1, (first, out["step_loss"])
    assert out["step_loss"] == sorted(out["step_loss"], reverse=True)  # every step went down


def test_synthetic_data_is_learnable(tmp_path, monkeypatch):
    torch.manual_seed(0)
    tr, te, info = _synthetic(tmp_path, 1024, 500, monkeypatch)
    assert info["source"] == "SYNTHETIC"
    train_loader, test_loader = loaders.device_loaders(tr, te, batch_size=64, device="cpu")
    model = models.cifar_resnet(width=8)   # notebook 01's fast-mode model: the 4 stages see the shifted patterns
    opt, sched = train.make_optimizer(model, lr=0.05, total_steps=3 * len(train_loader))
    h = train.fit(model, train_loader, test_loader, 3, opt, sched, "cpu", progress=False, log=lambda s: None)
    assert h.meta["data"] == "SYNTHETIC"
    assert h.test_acc[-1] > 0.4, f"synthetic set not learnable: test acc {h.test_acc}"


def _run(tmp_path, monkeypatch, epochs, ckdir, resume):
    torch.manual_seed(0)  # the same start for the full and the resumed run
    tr, te, _ = _synthetic(tmp_path, 192, 64, monkeypatch)
    train_loader, test_loader = loaders.make_loaders(tr, te, batch_size=64, workers=0)  # random augmentation
    model = _tiny()
    opt, sched = train.make_optimizer(model, lr=0.05, total_steps=3 * len(train_loader))
    return train.fit(model, train_loader, test_loader, epochs, opt, sched, "cpu", checkpoint_dir=ckdir,
                     resume=resume, progress=False, log=lambda s: None)


def test_resume_reproduces_the_loss_curve_exactly(tmp_path, monkeypatch):
    full = _run(tmp_path, monkeypatch, 3, str(tmp_path / "a"), False)
    _run(tmp_path, monkeypatch, 2, str(tmp_path / "b"), False)   # "interrupted" after 2 epochs
    torch.manual_seed(123)  # whatever happened in between must not matter
    resumed = _run(tmp_path, monkeypatch, 3, str(tmp_path / "b"), True)
    assert len(full.step_loss) == len(resumed.step_loss) == 9
    assert resumed.step_loss == full.step_loss  # exact, not approximate
    assert resumed.test_acc == full.test_acc and resumed.epoch == [0, 1, 2]
    state = torch.load(tmp_path / "b" / "last.pt", weights_only=True)
    assert state["epoch"] == 2 and set(state["rng"]) >= {"python", "numpy", "torch"}


def test_history_is_serialisable(tmp_path):
    h = train.History(meta={"data": "SYNTHETIC"})
    h.append(epoch=0, train_loss=2.0, train_acc=0.1, test_loss=2.1, test_acc=0.2, img_per_s=10.0, seconds=1.0)
    h.save(tmp_path / "h.json")
    back = train.History.load(tmp_path / "h.json")
    assert back == h and back.last()["test_acc"] == 0.2 and len(back) == 1


def test_compare_speed_rows_are_honest_on_cpu(tmp_path, monkeypatch):
    tr, _, _ = _synthetic(tmp_path, 64, 10, monkeypatch)
    rows = speed.compare_speed(_tiny, tr, batch_size=16, steps=2, warmup=1, device="cpu", workers=(0,),
                               try_compile=False, compile_note="skipped in fast mode")
    by = {r["variant"]: r for r in rows}
    assert by["DataLoader, 0 workers"]["img_per_s"] > 0 and by["DataLoader, 0 workers"]["speedup"] == 1.0
    assert by["data on device"]["status"] == "ok" and by["on device + channels_last"]["img_per_s"] > 0
    if not torch.cuda.is_available():
        # CPU bf16 autocast exists: the row says what was not measured and why, not "needs a GPU"
        assert by["on device + AMP (bf16)"] == {"variant": "on device + AMP (bf16)", "img_per_s": None,
                                                "status": speed.NOT_TIMED_ON_CPU, "speedup": None}
        assert "needs a GPU" not in speed.speed_table(rows)
        assert "not timed" in speed.NOT_TIMED_ON_CPU and "fp32" in speed.NOT_TIMED_ON_CPU
    assert by["on device + torch.compile"]["status"] == "skipped in fast mode"


def test_compare_speed_reports_a_failing_variant(tmp_path, monkeypatch):
    tr, _, _ = _synthetic(tmp_path, 32, 10, monkeypatch)

    def broken_compile(model, *a, **k):
        raise RuntimeError("inductor needs a C++ compiler")

    monkeypatch.setattr(torch, "compile", broken_compile)
    rows = speed.compare_speed(_tiny, tr, batch_size=16, steps=1, warmup=0, device="cpu", workers=(0,))
    assert rows[-1]["img_per_s"] is None
    assert rows[-1]["status"] == "failed: RuntimeError: inductor needs a C++ compiler"


def test_lab_tiny_end_to_end(tmp_path):
    env = {**os.environ, "DLTUTOR_OFFLINE": "1", "DLTUTOR_DATA": str(tmp_path / "data"),
           "DLTUTOR_FASHION_MNIST": "none"}
    cmd = [sys.executable, LAB, "--tiny", "--checkpoint-dir", str(tmp_path / "ck")]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [l for l in out.stdout.splitlines() if l.startswith("DLTUTOR_METRICS ")]
    assert len(lines) == 1, out.stdout
    m = json.loads(lines[0].split(" ", 1)[1])
    assert m["data"] == "SYNTHETIC" and m["tiny"] is True and m["epochs"] == 2
    assert m["rank"] == 0 and m["world_size"] == 1 and 0 <= m["test_acc"] <= 1 and m["img_per_s"] > 0
    assert "SYNTHETIC" in out.stdout and "CPU" in out.stdout or torch.cuda.is_available()
    assert (tmp_path / "ck" / "last.pt").exists()


def test_lab_help_shows_defaults():
    out = subprocess.run([sys.executable, LAB, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "(default: 30)" in out.stdout and "--resume" in out.stdout
