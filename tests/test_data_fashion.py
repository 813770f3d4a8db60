"""The offline order of dltutor.data.cifar10.load_cifar10: CIFAR-10 -> Fashion-MNIST -> SYNTHETIC.

Small Fashion-MNIST copies are written here in the real idx format (big-endian magic 0x0803 /
0x0801, then the dimensions, then uint8 pixels / labels, gzipped as Debian ships them), so
torchvision's own reader runs; `fashion_mnist.SIZES` is patched to their sizes. One test reads
Debian's real package (installed by scripts/setup.sh) and checks sizes and the mean/std constants.
"""
from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch
from torchvision.datasets import FashionMNIST

from dltutor import cli
from dltutor.data import cifar10 as data
from dltutor.data import fashion_mnist as fm
from dltutor.data import loaders, staging
from test_data import fake_cifar  # noqa: F401  (a fixture: a small real-format CIFAR-10)

N_TRAIN, N_TEST = 12, 6
LAB = os.path.join(os.path.dirname(__file__), "..", "course", "labs", "01_cifar10", "train.py")


def _write_idx(folder, prefix, images, labels):
    with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x0803, len(images), 28, 28) + images.tobytes())
    with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 0x0801, len(labels)) + labels.tobytes())


@pytest.fixture
def fake_fashion(tmp_path, monkeypatch):
    """(folder with the four idx .gz files, train images N x 28 x 28, train labels); offline, and
    DLTUTOR_FASHION_MNIST points at the folder."""
    rng = np.random.default_rng(0)
    src = tmp_path / "fashion"
    src.mkdir()
    images = rng.integers(1, 256, (N_TRAIN + N_TEST, 28, 28), dtype=np.uint8)
    labels = (np.arange(N_TRAIN + N_TEST) % 10).astype(np.uint8)
    _write_idx(src, "train", images[:N_TRAIN], labels[:N_TRAIN])
    _write_idx(src, "t10k", images[N_TRAIN:], labels[N_TRAIN:])
    monkeypatch.setattr(fm, "SIZES", {True: N_TRAIN, False: N_TEST})
    monkeypatch.setenv(fm.ENV, str(src))
    monkeypatch.setenv(data.OFFLINE_ENV, "1")
    return src, images[:N_TRAIN], labels[:N_TRAIN]


def test_fashion_mnist_is_chosen_without_cifar10_and_labelled(fake_fashion, tmp_path, capsys):
    src, images, labels = fake_fashion
    root = tmp_path / "data"
    train, test, info = data.load_cifar10(root=root)
    out = capsys.readouterr().out
    assert info["source"] == train.source == test.source == "Fashion-MNIST" and not train.synthetic
    assert data.data_label(train) == data.data_label(info) == info["label"] == fm.LABEL
    assert "Fashion-MNIST (stand-in for CIFAR-10)" in out and "NOT CIFAR-10 results" in out
    assert "SYNTHETIC" not in out and "python -m dltutor data stage --from DIR" in out
    assert (info["train_size"], info["test_size"]) == (len(train), len(test)) == (N_TRAIN, N_TEST)
    assert info["classes"] == list(FashionMNIST.classes)
    img, y = train[5]
    pixels = np.asarray(img)
    assert pixels.shape == (32, 32, 3) and y == labels[5]
    for c in range(3):  # 28x28 in the middle of a black 32x32 frame, on every channel
        np.testing.assert_array_equal(pixels[2:30, 2:30, c], images[5])
    assert pixels[:2].max() == pixels[30:].max() == pixels[:, :2].max() == 0
    assert sorted(p.name for p in fm.raw_dir(root).iterdir()) == sorted(fm.FILES)
    assert not list(fm.raw_dir(root).parent.glob(".staging-*"))


def test_fashion_mnist_normalised_with_its_own_statistics(fake_fashion, tmp_path):
    train, test, _ = data.load_cifar10(root=tmp_path / "data", quiet=True)
    assert data.norm_stats(train) == (fm.MEAN, fm.STD) != (data.MEAN, data.STD)
    x, _ = loaders.to_device_tensors(test, "cpu")
    expect = (torch.from_numpy(np.ascontiguousarray(test.data)).permute(0, 3, 1, 2).float() / 255
              - fm.MEAN[0]) / fm.STD[0]
    torch.testing.assert_close(x, expect)
    tr_loader, te_loader = loaders.make_loaders(train, test, batch_size=4, workers=0)
    xb, _ = next(iter(te_loader))
    torch.testing.assert_close(xb, x[:len(xb)], atol=1e-5, rtol=0)
    assert data.data_label(tr_loader) == fm.LABEL
    dev_train, _ = loaders.device_loaders(train, test, batch_size=4, device="cpu")
    assert data.data_label(dev_train) == fm.LABEL


def test_cifar10_wins_over_fashion_mnist(fake_cifar, fake_fashion):  # noqa: F811
    *_, info_c = data.load_cifar10(root=fake_cifar[0], quiet=True)
    assert info_c["source"] == "cifar10" and data.data_label(info_c) == "CIFAR-10"
    assert not fm.raw_dir(fake_cifar[0]).exists()   # Fashion-MNIST was not even prepared


@pytest.mark.parametrize("how", ["env none", "argument", "not installed"])
def test_synthetic_only_when_fashion_mnist_is_absent_or_off(tmp_path, monkeypatch, capsys, how):
    monkeypatch.setenv(data.OFFLINE_ENV, "1")
    kw = {}
    if how == "env none":
        monkeypatch.setenv(fm.ENV, "none")
    elif how == "argument":
        kw["fashion_mnist"] = False
    else:
        monkeypatch.delenv(fm.ENV, raising=False)
        monkeypatch.setattr(fm, "DEBIAN_DIR", str(tmp_path / "no-such-package"))
    train, _, info = data.load_cifar10(root=tmp_path / "data", train_subset=20, test_subset=10, **kw)
    out = capsys.readouterr().out
    assert info["source"] == "SYNTHETIC" and data.data_label(info) == "SYNTHETIC" and train.synthetic
    assert out.count("SYNTHETIC") == 1
    hint = "not installed: sudo apt-get install dataset-fashion-mnist" if how == "not installed" else "turned off"
    assert hint in out, out


@pytest.mark.parametrize("damage", ["corrupt", "missing", "wrong size"])
def test_broken_fashion_mnist_gives_one_clear_error(fake_fashion, tmp_path, monkeypatch, damage):
    src = fake_fashion[0]
    target = src / "t10k-images-idx3-ubyte.gz"
    if damage == "corrupt":
        raw = bytearray(target.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        target.write_bytes(bytes(raw))
    elif damage == "missing":
        target.unlink()
    else:
        monkeypatch.setattr(fm, "SIZES", {True: 60_000, False: 10_000})
    with pytest.raises(fm.FashionMNISTError) as err:
        data.load_cifar10(root=tmp_path / "data", quiet=True)
    msg = str(err.value)
    assert {"corrupt": "is corrupt", "missing": "is missing", "wrong size": "expected 60,000"}[damage] in msg
    if damage != "wrong size":
        assert "t10k-images-idx3-ubyte" in msg
    assert "apt-get install --reinstall dataset-fashion-mnist" in msg and f"{fm.ENV}=none" in msg
    assert not fm.raw_dir(tmp_path / "data").exists()   # nothing half-prepared is left behind


def test_truncated_prepared_copy_says_delete_it(fake_fashion, tmp_path):
    root = tmp_path / "data"
    data.load_cifar10(root=root, quiet=True)
    labels = fm.raw_dir(root) / "train-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:-3])
    with pytest.raises(fm.FashionMNISTError, match=f"Delete {fm.raw_dir(root)}"):
        data.load_cifar10(root=root, quiet=True)


def test_cli_stages_and_reports_fashion_mnist(fake_fashion, tmp_path, capsys):
    src, dest = fake_fashion[0], tmp_path / "staged"
    assert cli.main(["data", "stage", "--from", str(src), "--dest", str(dest)]) == 0
    assert f"{fm.LABEL} staged at {fm.raw_dir(dest)}" in capsys.readouterr().out
    assert cli.main(["data", "where", "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    assert f"Fashion-MNIST: prepared in {fm.raw_dir(dest)}" in out
    assert f"without CIFAR-10 the course trains on: {fm.LABEL}" in out
    assert staging.describe(dest)["fallback"] == fm.LABEL


def test_debian_package_is_the_real_fashion_mnist(tmp_path, monkeypatch):
    monkeypatch.delenv(fm.ENV, raising=False)
    assert fm.has_files(fm.DEBIAN_DIR), (f"{fm.DEBIAN_DIR} lacks the idx files: run `bash "
                                         f"scripts/setup.sh` (installs {fm.DEBIAN_PACKAGE})")
    train, test = fm.load(tmp_path)
    assert (len(train), len(test)) == (60_000, 10_000) and train.classes == list(FashionMNIST.classes)
    assert np.bincount(train.targets).tolist() == [6000] * 10   # Fashion-MNIST is balanced
    grey = train.data[..., 0].astype(np.float64) / 255
    assert abs(grey.mean() - fm.MEAN[0]) < 5e-4 and abs(grey.std() - fm.STD[0]) < 5e-4


def test_lab01_tiny_on_fashion_mnist_says_so(tmp_path):
    env = {**os.environ, "DLTUTOR_DATA": str(tmp_path / "data"), "DLTUTOR_OFFLINE": "1"}
    env.pop(fm.ENV, None)   # Debian's real copy, as on a machine the set-up prepared
    out = subprocess.run([sys.executable, LAB, "--tiny"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads(out.stdout.splitlines()[-1].split(" ", 1)[1])
    assert metrics["data"] == "Fashion-MNIST" and "SYNTHETIC" not in out.stdout
    numbers = [l for l in out.stdout.splitlines() if "test acc" in l or "train /" in l]
    assert numbers and all(fm.LABEL in l for l in numbers), out.stdout
