"""CIFAR-10 for the course: the real torchvision dataset, or a clearly labelled SYNTHETIC stand-in.

`load_cifar10()` decides in this order:
1. `<data dir>/cifar-10-batches-py` is there: torchvision loads it and checks every md5. A corrupt
   copy raises `CorruptDataError` (torchvision's message plus how to fix it); it is never replaced
   silently.
2. Not there and downloads are allowed (not `DLTUTOR_OFFLINE=1`, not `download=False`): a short
   reachability probe, then torchvision's download with a socket timeout, so it never hangs.
3. Otherwise ONE message names both fixes (`python -m dltutor data stage --from DIR`, or downloading
   on a node with internet) and a learnable SYNTHETIC dataset of the same shape is returned.
   `info["source"] == "SYNTHETIC"`, `ds.source == "SYNTHETIC"`, and every title made by dltutor says so.

Staging (copying a shared copy, e.g. on a cluster file system) lives in `dltutor.staging`.
"""
from __future__ import annotations

import os
import socket

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from dltutor import env

OFFLINE_ENV = "DLTUTOR_OFFLINE"
BASE_FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
REAL, SYNTHETIC = "cifar10", "SYNTHETIC"
DOWNLOAD_HOST = "www.cs.toronto.edu"


class CorruptDataError(RuntimeError):
    """A local CIFAR-10 copy exists but fails torchvision's integrity (md5) check."""


def offline() -> bool:
    """True when `DLTUTOR_OFFLINE` is set to a true value: never touch the network (tests set it)."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def cifar10_dir(root=None):
    return os.path.join(env.data_dir() if root is None else root, BASE_FOLDER)


def fix_message(root) -> str:
    """The two ways to get the real CIFAR-10 into `root`."""
    return (f"To use the real CIFAR-10 in {root}, either\n"
            f"  1. stage a shared copy:  python -m dltutor data stage --from DIR\n"
            f"     (DIR holds {BASE_FOLDER}/ or {ARCHIVE}), or\n"
            f"  2. download it on a node with internet (e.g. a login node), same DLTUTOR_DATA:\n"
            f"     python -c \"from dltutor.data import download_cifar10; download_cifar10()\"")


def _torchvision_cifar(root, train):
    from torchvision.datasets import CIFAR10  # looked up at call time, so tests can patch md5s
    return CIFAR10(root=str(root), train=train, download=False)


def _load_real(root):
    try:
        return _torchvision_cifar(root, True), _torchvision_cifar(root, False)
    except RuntimeError as exc:
        raise CorruptDataError(
            f"{exc}\n{cifar10_dir(root)} exists but failed torchvision's integrity (md5) check.\n"
            f"Delete it and get a clean copy. {fix_message(root)}") from exc


def download_cifar10(root=None, timeout: float = 60.0, probe_timeout: float = 5.0) -> str:
    """Download CIFAR-10 with torchvision into `root` (default: the data dir); returns the folder.

    Raises OSError quickly when the host cannot be reached; a stalled transfer fails after `timeout`.
    """
    root = str(env.data_dir() if root is None else root)
    with socket.create_connection((DOWNLOAD_HOST, 443), timeout=probe_timeout):
        pass
    from torchvision.datasets import CIFAR10
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)
    try:
        os.makedirs(root, exist_ok=True)
        CIFAR10(root=root, train=True, download=True)
    finally:
        socket.setdefaulttimeout(old)
    return str(cifar10_dir(root))


# ---------------------------------------------------------------- the synthetic stand-in
def _class_templates(num_classes: int, seed: int = 1234) -> np.ndarray:
    """Per class: smooth colour blobs plus an oriented stripe pattern, values roughly in [-1, 1]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    out = np.empty((num_classes, 32, 32, 3), np.float32)
    for c in range(num_classes):
        coarse = rng.normal(size=(4, 4, 3))
        blobs = np.kron(coarse, np.ones((8, 8, 1)))  # 32x32x3, blocky colour layout
        angle, freq = rng.uniform(0, np.pi), rng.uniform(0.15, 0.5)
        stripes = np.sin(freq * (np.cos(angle) * xx + np.sin(angle) * yy) + rng.uniform(0, 6.3))
        out[c] = 0.5 * blobs + 0.6 * stripes[..., None] * rng.uniform(-1, 1, size=3)
    return out


class SyntheticCIFAR10(Dataset):
    """CIFAR-10-shaped (32x32 RGB uint8, 10 classes) and learnable: each class has its own colour
    layout and stripe pattern; each image is shifted, scaled and noised. It is NOT CIFAR-10."""

    source = SYNTHETIC
    synthetic = True

    def __init__(self, n: int, num_classes: int = 10, seed: int = 0, noise: float = 0.6):
        rng = np.random.default_rng(seed)
        templates = _class_templates(num_classes)
        self.targets = rng.permutation(np.arange(n) % num_classes).tolist()
        self.classes = [f"pattern {c}" for c in range(num_classes)]
        self.data = np.empty((n, 32, 32, 3), np.uint8)
        idx = np.arange(32)
        for start in range(0, n, 4096):
            labels = np.asarray(self.targets[start:start + 4096])
            k = len(labels)
            rows = (idx[None, :] + rng.integers(-4, 5, k)[:, None]) % 32
            cols = (idx[None, :] + rng.integers(-4, 5, k)[:, None]) % 32
            img = templates[labels[:, None, None], rows[:, :, None], cols[:, None, :]]
            img = img * rng.uniform(0.6, 1.4, (k, 1, 1, 1)) + rng.normal(0, noise, img.shape)
            self.data[start:start + k] = np.clip(128 + 60 * img, 0, 255).astype(np.uint8)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        from PIL import Image
        return Image.fromarray(self.data[i]), self.targets[i]


def synthetic_images(n: int, shape=(3, 224, 224), num_classes: int = 1000, device="cpu", seed: int = 0):
    """Random images and labels as tensors, for throughput benchmarks (e.g. ResNet-50)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, *shape), generator=g)
    y = torch.randint(0, num_classes, (n,), generator=g)
    return x.to(device), y.to(device)


# ---------------------------------------------------------------- the entry point
def _subset(ds, n, seed):
    if n is None or n >= len(ds):
        return ds
    idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))[:n].tolist()
    sub = Subset(ds, idx)
    sub.source = ds.source
    return sub


def load_cifar10(root=None, download=None, train_subset=None, test_subset=None, seed: int = 0,
                 quiet: bool = False):
    """Return `(train_ds, test_ds, info)`; items are `(PIL image, int label)`.

    download: None = try when not offline (`DLTUTOR_OFFLINE`), False = never, True = try even then.
    info: source ('cifar10' | 'SYNTHETIC'), root, sizes, classes, reason (why synthetic).
    """
    root = env.data_dir() if root is None else root
    folder = cifar10_dir(root)
    reason = None
    if not os.path.isdir(folder) and os.path.isfile(os.path.join(root, ARCHIVE)):
        stage_cifar10(os.path.join(root, ARCHIVE), dest=root)
    if not os.path.isdir(folder):
        allowed = (not offline()) if download is None else bool(download)
        if not allowed:
            reason = f"offline: {OFFLINE_ENV}=1" if offline() else "download=False"
        else:
            try:
                download_cifar10(root)
            except Exception as exc:  # no route, DNS, timeout, HTTP error: fall back, say why
                reason = f"download failed: {type(exc).__name__}: {exc}"
    if reason is None:
        train, test = _load_real(root)
        train.source = test.source = REAL
        train.synthetic = test.synthetic = False
    else:
        train = SyntheticCIFAR10(train_subset or 50000, seed=seed)
        test = SyntheticCIFAR10(test_subset or 10000, seed=seed + 1)
        if not quiet:
            print(f"NOTE: CIFAR-10 not found in {root} ({reason}).\n"
                  f"Using a SYNTHETIC CIFAR-10-shaped stand-in (3x32x32, 10 classes): accuracies "
                  f"below are NOT CIFAR-10 results.\n{fix_message(root)}", flush=True)
    train, test = _subset(train, train_subset, seed), _subset(test, test_subset, seed + 1)
    info = {"source": train.source, "root": str(root), "train_size": len(train),
            "test_size": len(test), "classes": list(getattr(train, "dataset", train).classes), "reason": reason}
    return train, test, info


def data_label(obj) -> str:
    """'CIFAR-10' or 'SYNTHETIC' for a dataset, a loader or an info dict."""
    src = obj.get("source") if isinstance(obj, dict) else getattr(getattr(obj, "dataset", obj), "source", REAL)
    return SYNTHETIC if src == SYNTHETIC else "CIFAR-10"




# ---------------------------------------------------------------- loaders
class _Transformed(Dataset):
    def __init__(self, ds, transform):
        self.ds, self.transform, self.source = ds, transform, getattr(ds, "source", REAL)

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        img, y = self.ds[i]
        return self.transform(img), y


def transforms(augment: bool):
    """The standard CIFAR pipeline: (random crop 32 pad 4 + flip when `augment`), to tensor, normalise."""
    from torchvision import transforms as T
    steps = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()] if augment else []
    return T.Compose(steps + [T.ToTensor(), T.Normalize(MEAN, STD)])


def make_loaders(train_ds, test_ds, batch_size: int = 128, workers: int = 2, augment: bool = True,
                 test_batch_size=None, pin_memory=None, drop_last: bool = True):
    """DataLoaders with the standard CIFAR transforms; `workers` processes decode and augment."""
    from torch.utils.data import DataLoader
    pin = torch.cuda.is_available() if pin_memory is None else pin_memory
    extra = {"persistent_workers": False, "prefetch_factor": 4} if workers > 0 else {}
    train = DataLoader(_Transformed(train_ds, transforms(augment)), batch_size=batch_size,
                       shuffle=True, num_workers=workers, pin_memory=pin, drop_last=drop_last, **extra)
    test = None if test_ds is None else DataLoader(
        _Transformed(test_ds, transforms(False)), batch_size=test_batch_size or 2 * batch_size,
        shuffle=False, num_workers=workers, pin_memory=pin, **extra)
    return train, test


def _raw(ds):
    """(uint8 N x 32 x 32 x 3 array, int64 labels) of a CIFAR-like dataset or a Subset of one."""
    if isinstance(ds, Subset):
        data, targets = _raw(ds.dataset)
        return data[ds.indices], targets[ds.indices]
    return np.asarray(ds.data), np.asarray(ds.targets, dtype=np.int64)


def to_device_tensors(ds, device=None):
    """The whole dataset as normalised float tensors resident on `device`: `(x, y)`."""
    device = env.device() if device is None else device
    data, targets = _raw(ds)
    x = torch.from_numpy(data).to(device).permute(0, 3, 1, 2).float().div_(255)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    return ((x - mean) / std).contiguous(), torch.from_numpy(targets).to(device)


class DeviceLoader:
    """Batches straight from tensors already on the device (no workers, no copies per step).

    `augment` does the random crop (pad 4) and flip on the device, per image."""

    def __init__(self, x, y, batch_size: int = 128, shuffle: bool = True, augment: bool = False,
                 drop_last: bool = True, source: str = REAL):
        self.x, self.y, self.batch_size = x, y, batch_size
        self.shuffle, self.augment, self.drop_last, self.source = shuffle, augment, drop_last, source

    def __len__(self):
        n = len(self.x) // self.batch_size
        return n if self.drop_last or len(self.x) % self.batch_size == 0 else n + 1

    def _augment(self, xb):
        b, dev = xb.shape[0], xb.device
        padded = torch.nn.functional.pad(xb, (4, 4, 4, 4))
        off = torch.randint(0, 9, (2, b)).to(dev)
        ar = torch.arange(32, device=dev)
        rows, cols = (off[0][:, None] + ar)[:, :, None], (off[1][:, None] + ar)[:, None, :]
        out = padded.permute(0, 2, 3, 1)[torch.arange(b, device=dev)[:, None, None], rows, cols]
        out = out.permute(0, 3, 1, 2)
        flip = (torch.rand(b) < 0.5).to(dev)
        return torch.where(flip[:, None, None, None], out.flip(3), out).contiguous()

    def __iter__(self):
        n = len(self.x)
        order = torch.randperm(n).to(self.x.device) if self.shuffle else torch.arange(n, device=self.x.device)
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            xb = self.x[idx]
            yield (self._augment(xb) if self.augment else xb), self.y[idx]


def device_loaders(train_ds, test_ds, batch_size: int = 128, device=None, augment: bool = True):
    """`make_loaders`' counterpart with the data resident on the device."""
    src = data_label(train_ds)
    xtr, ytr = to_device_tensors(train_ds, device)
    xte, yte = to_device_tensors(test_ds, device)
    return (DeviceLoader(xtr, ytr, batch_size, True, augment, source=src),
            DeviceLoader(xte, yte, 2 * batch_size, False, False, drop_last=False, source=src))


# staging a shared copy, and the doctor's facts (`describe_data`), live in dltutor.staging
from dltutor.staging import describe as describe_data, stage_cifar10  # noqa: E402,F401
