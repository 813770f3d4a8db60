"""dltutor.data.cifar10 and dltutor.data.staging against a small CIFAR-10 written here in the real format.

The files are what the real `cifar-10-python.tar.gz` holds: python pickles `data_batch_1..5` and
`test_batch` (keys batch_label, data = uint8 N x 3072 in CHW row order, labels, filenames) and
`batches.meta` (label_names, num_cases_per_batch, num_vis). torchvision's CIFAR10 checks them
against the md5 sums of the REAL files, so the `fake_cifar` fixture patches those class attributes
(train_list, test_list, meta md5, tgz_md5) with the sums of the small files, for this test only.
Everything else (integrity check, unpickling, HWC transposition, archive extraction) is
torchvision's real code path. No test touches the network.
"""
from __future__ import annotations

import hashlib
import pickle
import socket
import tarfile

import numpy as np
import pytest
import torch
from torchvision.datasets import CIFAR10

from dltutor.data import cifar10 as data
from dltutor.data import fashion_mnist, loaders, staging, synthetic

PER_BATCH, N_TEST = 8, 10


def _md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def _write_batch(path, images, labels, name):
    entry = {"batch_label": name, "data": images.reshape(len(images), -1), "labels": labels,
             "filenames": [f"img_{i}.png" for i in range(len(labels))]}
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)


@pytest.fixture
def fake_cifar(tmp_path, monkeypatch):
    """(src dir holding cifar-10-batches-py, archive path, the images as N x 3 x 32 x 32 arrays)."""
    monkeypatch.setenv(data.OFFLINE_ENV, "1")
    rng = np.random.default_rng(0)
    src = tmp_path / "shared"
    folder = src / staging.BASE_FOLDER
    folder.mkdir(parents=True)
    images = rng.integers(0, 256, (5 * PER_BATCH + N_TEST, 3, 32, 32), dtype=np.uint8)
    labels = [int(i % 10) for i in range(len(images))]
    train_list = []
    for b in range(5):
        sl = slice(b * PER_BATCH, (b + 1) * PER_BATCH)
        _write_batch(folder / f"data_batch_{b + 1}", images[sl], labels[sl], f"training batch {b + 1} of 5")
        train_list.append([f"data_batch_{b + 1}", _md5(folder / f"data_batch_{b + 1}")])
    _write_batch(folder / "test_batch", images[-N_TEST:], labels[-N_TEST:], "testing batch 1 of 1")
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": list(data.CLASSES), "num_cases_per_batch": PER_BATCH, "num_vis": 3072},
                    f, protocol=2)
    archive = tmp_path / "archive" / data.ARCHIVE
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=staging.BASE_FOLDER)
    monkeypatch.setattr(CIFAR10, "train_list", train_list)
    monkeypatch.setattr(CIFAR10, "test_list", [["test_batch", _md5(folder / "test_batch")]])
    monkeypatch.setattr(CIFAR10, "meta", {**CIFAR10.meta, "md5": _md5(folder / "batches.meta")})
    monkeypatch.setattr(CIFAR10, "tgz_md5", _md5(archive))
    return src, archive, images, labels


def _check_loaded(root, images, labels):
    train, test, info = data.load_cifar10(root=root, download=False)
    assert info["source"] == "cifar10" and train.source == "cifar10" and not train.synthetic
    assert (info["train_size"], info["test_size"]) == (5 * PER_BATCH, N_TEST)
    assert info["classes"] == list(data.CLASSES)
    img, y = train[PER_BATCH + 3]  # first batch file ends at PER_BATCH: checks the batch order too
    np.testing.assert_array_equal(np.asarray(img), images[PER_BATCH + 3].transpose(1, 2, 0))
    assert y == labels[PER_BATCH + 3]
    np.testing.assert_array_equal(np.asarray(test[0][0]), images[-N_TEST].transpose(1, 2, 0))


def test_loads_real_format_through_torchvision(fake_cifar):
    src, _, images, labels = fake_cifar
    _check_loaded(src, images, labels)


def test_subsets_are_seeded_and_sized(fake_cifar):
    src = fake_cifar[0]
    a, t, info = data.load_cifar10(root=src, train_subset=16, test_subset=4, seed=3)
    b, _, _ = data.load_cifar10(root=src, train_subset=16, test_subset=4, seed=3)
    assert (len(a), len(t), info["train_size"]) == (16, 4, 16)
    assert a.indices == b.indices and a.source == "cifar10"


@pytest.mark.parametrize("which", ["parent", "folder", "archive", "archive_parent"])
def test_stage_then_load(fake_cifar, tmp_path, which):
    src, archive, images, labels = fake_cifar
    source = {"parent": src, "folder": src / staging.BASE_FOLDER, "archive": archive,
              "archive_parent": archive.parent}[which]
    dest = tmp_path / "datadir"
    assert staging.describe(dest)["staged"] is False
    out = data.stage_cifar10(source, dest=dest)
    assert out == str(dest / staging.BASE_FOLDER)
    facts = staging.describe(dest)
    assert facts["staged"] is True and facts["missing"] == [] and facts["free_gb"] > 0
    assert not list(dest.glob(".staging-*")), "temporary staging folder left behind"
    _check_loaded(dest, images, labels)


def test_stage_rejects_corrupt_archive(fake_cifar, tmp_path):
    _, archive, _, _ = fake_cifar
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    archive.write_bytes(bytes(raw))
    with pytest.raises(staging.CorruptDataError, match="md5"):
        data.stage_cifar10(archive, dest=tmp_path / "datadir")
    assert not (tmp_path / "datadir" / staging.BASE_FOLDER).exists()


def test_stage_from_dir_without_cifar_says_what_it_wants(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        staging.stage_cifar10(tmp_path, dest=tmp_path / "d")


def test_corrupt_copy_raises_integrity_error_with_fix(fake_cifar):
    src = fake_cifar[0]
    batch = src / staging.BASE_FOLDER / "data_batch_3"
    raw = bytearray(batch.read_bytes())
    raw[-5] ^= 0xFF
    batch.write_bytes(bytes(raw))
    with pytest.raises(staging.CorruptDataError) as err:
        data.load_cifar10(root=src)
    msg = str(err.value)
    assert "Dataset not found or corrupted" in msg  # torchvision's own integrity message
    assert "python -m dltutor data stage --from DIR" in msg and "download" in msg


def test_offline_fallback_is_synthetic_labelled_and_names_both_fixes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(data.OFFLINE_ENV, "1")
    monkeypatch.setenv(fashion_mnist.ENV, "none")   # no Fashion-MNIST stand-in either

    def no_network(*a, **k):
        raise AssertionError("offline mode touched the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    train, test, info = data.load_cifar10(root=tmp_path, train_subset=40, test_subset=20)
    out = capsys.readouterr().out
    assert out.count("SYNTHETIC") == 1, out
    assert "python -m dltutor data stage --from DIR" in out
    assert "download it on a node with internet" in out and "download_cifar10()" in out
    assert info["source"] == "SYNTHETIC" and train.source == test.source == "SYNTHETIC"
    assert data.data_label(train) == data.data_label(info) == "SYNTHETIC"
    assert (len(train), len(test)) == (40, 20)
    img, y = train[0]
    assert np.asarray(img).shape == (32, 32, 3) and 0 <= y < 10
    assert sorted(set(train.targets)) == list(range(10))


def test_failed_download_falls_back_with_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(data.OFFLINE_ENV, raising=False)
    monkeypatch.setenv(fashion_mnist.ENV, "none")

    def unreachable(root=None, **kw):
        raise OSError("no route to host")

    monkeypatch.setattr(data, "download_cifar10", unreachable)
    _, _, info = data.load_cifar10(root=tmp_path, train_subset=10, test_subset=10)
    assert info["source"] == "SYNTHETIC" and "no route to host" in info["reason"]
    assert "no route to host" in capsys.readouterr().out


def test_download_probe_fails_fast(monkeypatch, tmp_path):
    calls = []

    def refuse(addr, timeout=None):
        calls.append(timeout)
        raise OSError("unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(OSError):
        data.download_cifar10(tmp_path, probe_timeout=2.0)
    assert calls == [2.0]


def test_loaders_normalise_and_device_tensors_match(tmp_path, monkeypatch):
    monkeypatch.setenv(data.OFFLINE_ENV, "1")
    monkeypatch.setenv(fashion_mnist.ENV, "none")
    train, test, _ = data.load_cifar10(root=tmp_path, train_subset=64, test_subset=32, quiet=True)
    tr_loader, te_loader = loaders.make_loaders(train, test, batch_size=16, workers=0)
    x, y = next(iter(tr_loader))
    assert x.shape == (16, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (16,)
    xt, yt = next(iter(te_loader))  # no augmentation: must equal the device-resident copy
    xd, yd = loaders.to_device_tensors(test, "cpu")
    torch.testing.assert_close(xt, xd[:len(xt)], atol=1e-5, rtol=0)
    assert torch.equal(yt, yd[:len(yt)])
    assert abs(xd.mean().item()) < 1.5 and xd.shape == (32, 3, 32, 32)
    dl = loaders.DeviceLoader(xd, yd, batch_size=8, shuffle=True, augment=True, drop_last=False)
    batches = list(dl)
    assert len(batches) == len(dl) == 4 and all(b[0].shape == (8, 3, 32, 32) for b in batches)
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == sorted(yd.tolist())


def test_synthetic_images_for_benchmarks():
    x, y = synthetic.synthetic_images(4, (3, 64, 64), num_classes=1000, seed=1)
    x2, _ = synthetic.synthetic_images(4, (3, 64, 64), num_classes=1000, seed=1)
    assert x.shape == (4, 3, 64, 64) and y.shape == (4,) and int(y.max()) < 1000
    assert torch.equal(x, x2)
