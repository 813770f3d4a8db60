"""Fashion-MNIST: the REAL data set the course trains on offline when CIFAR-10 is not there.

It is a different data set (70,000 greyscale 28x28 images of clothing, 10 classes), not CIFAR-10,
and every printout and title made by dltutor says so: `LABEL`, "Fashion-MNIST (stand-in for CIFAR-10)".

Where the four idx files come from (`source_dir()`):
- `DLTUTOR_FASHION_MNIST=DIR`: a folder holding them (`.gz` or unzipped);
  `DLTUTOR_FASHION_MNIST=none` turns the stand-in off (the tests use it to get the SYNTHETIC set);
- else Debian's `dataset-fashion-mnist` (`scripts/setup.sh` installs it): /usr/share/datasets/fashion-mnist.

`prepare(src, root)` unzips them into `<root>/FashionMNIST/raw`, the layout torchvision's
`FashionMNIST` reads, through a temporary folder: it moves into place only after torchvision has
read both splits and they have 60,000 / 10,000 images. `load(root)` returns them CIFAR-shaped
(`AsCIFAR`: padded 28->32, the grey channel repeated 3 times), so the course's models run unchanged.
A missing or corrupt file raises `FashionMNISTError`, which says what to do.
"""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

FASHION = "Fashion-MNIST"
LABEL = "Fashion-MNIST (stand-in for CIFAR-10)"
ENV = "DLTUTOR_FASHION_MNIST"
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
DEBIAN_PACKAGE = "dataset-fashion-mnist"
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
         "t10k-labels-idx1-ubyte")
SIZES = {True: 60_000, False: 10_000}          # train, test
MEAN = (0.2190, 0.2190, 0.2190)                # of the padded 32x32 training images, per channel
STD = (0.3318, 0.3318, 0.3318)
_OFF = {"none", "off", "0", "no", "false"}
_READ_ERRORS = (OSError, EOFError, zlib.error, AssertionError, RuntimeError, ValueError)


class FashionMNISTError(RuntimeError):
    """The Fashion-MNIST files are there but missing a part or unreadable."""


def disabled() -> bool:
    """True when `DLTUTOR_FASHION_MNIST=none` (or off/0/no/false)."""
    return os.environ.get(ENV, "").strip().lower() in _OFF


def source_dir() -> Path | None:
    """Where the idx files are: `$DLTUTOR_FASHION_MNIST`, else Debian's folder; None if neither."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in _OFF:
        return None
    if value:
        return Path(value).expanduser()
    return Path(DEBIAN_DIR) if os.path.isdir(DEBIAN_DIR) else None


def raw_dir(root) -> Path:
    """`<root>/FashionMNIST/raw`, where torchvision's FashionMNIST looks."""
    return Path(root) / "FashionMNIST" / "raw"


def fix_message(src) -> str:
    return (f"Reinstall it (sudo apt-get install --reinstall {DEBIAN_PACKAGE}), point {ENV}=DIR at "
            f"a good copy of the four idx files ({', '.join(FILES)}, .gz or not), or set "
            f"{ENV}=none to use the SYNTHETIC stand-in instead."
            + (f" (files read from {src})" if src else ""))


def has_files(src) -> bool:
    """True when `src` holds all four idx files (.gz or unzipped)."""
    return all((Path(src) / n).is_file() or (Path(src) / f"{n}.gz").is_file() for n in FILES)


def _unzip(src: Path, name: str, out: Path):
    gz, plain = src / f"{name}.gz", src / name
    if gz.is_file():
        with gzip.open(gz, "rb") as fin, open(out / name, "wb") as fout:
            shutil.copyfileobj(fin, fout)
    elif plain.is_file():
        shutil.copyfile(plain, out / name)
    else:
        raise FileNotFoundError(f"{gz} (or {plain}) is missing")


def _torchvision(root, train: bool):
    from torchvision.datasets import FashionMNIST
    return FashionMNIST(root=str(root), train=train, download=False)


def _read_checked(root, where) -> tuple:
    """(train, test) torchvision datasets of `root`, each with the expected size; else the error."""
    out = []
    for train in (True, False):
        try:
            ds = _torchvision(root, train)
        except _READ_ERRORS as exc:
            raise FashionMNISTError(f"Fashion-MNIST in {where} is unreadable: {type(exc).__name__}: "
                                    f"{exc}") from exc
        split = "train" if train else "test"
        ok = (len(ds) == SIZES[train] and tuple(ds.data.shape[1:]) == (28, 28)
              and len(ds.targets) == len(ds) and int(ds.targets.min()) >= 0 and int(ds.targets.max()) <= 9)
        if not ok:
            raise FashionMNISTError(f"Fashion-MNIST in {where}: the {split} split has {len(ds):,} images "
                                    f"of {tuple(ds.data.shape[1:])} (expected {SIZES[train]:,} of 28x28, "
                                    f"labels 0-9)")
        out.append(ds)
    return tuple(out)


def prepare(src, root, replace: bool = False) -> Path:
    """Unzip the idx files of `src` into `<root>/FashionMNIST/raw`, checked; returns that folder.
    replace=True swaps out a complete copy already there (`data stage`); else that copy is kept."""
    src, final = Path(src).expanduser(), raw_dir(root)
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".staging-") as tmp:
        out = Path(tmp) / "FashionMNIST" / "raw"
        out.mkdir(parents=True)
        for name in FILES:
            try:
                _unzip(src, name, out)
            except FileNotFoundError as exc:
                raise FashionMNISTError(f"Fashion-MNIST: {exc}.\n{fix_message(src)}") from exc
            except _READ_ERRORS as exc:
                raise FashionMNISTError(f"Fashion-MNIST: {src / name}.gz is corrupt ({type(exc).__name__}: "
                                        f"{exc}).\n{fix_message(src)}") from exc
        try:
            _read_checked(tmp, src)
        except FashionMNISTError as exc:
            raise FashionMNISTError(f"{exc}.\n{fix_message(src)}") from exc
        if final.exists() and (replace or not has_files(final)):
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.replace(out, final)
        except OSError:
            if not has_files(final):   # else another process (a rank) prepared it first: keep that
                raise
    return final


class AsCIFAR(Dataset):
    """Fashion-MNIST presented like CIFAR-10: 32x32x3 uint8 (`data`), int `targets`, 10 `classes`;
    items are (PIL image, label). The 28x28 images are padded by 2 black pixels on every side and
    the grey channel is repeated three times. It is Fashion-MNIST, NOT CIFAR-10."""

    source = FASHION
    synthetic = False

    def __init__(self, tv_ds):
        grey = np.pad(tv_ds.data.numpy(), ((0, 0), (2, 2), (2, 2)))
        self.data = np.broadcast_to(grey[..., None], (*grey.shape, 3))  # a read-only view, no copy
        self.targets = tv_ds.targets.tolist()
        self.classes = list(tv_ds.classes)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        from PIL import Image
        return Image.fromarray(self.data[i]), self.targets[i]


def prepared_root(root) -> Path:
    """The data root to read `FashionMNIST/raw` from, or to prepare it in: `root` when it holds the
    files or this user may write it, else the user's own data folder (dltutor.data.roots)."""
    from dltutor.data import roots
    return roots.holding(root, lambda r: has_files(raw_dir(r)))


def load(root) -> tuple | None:
    """(train, test) `AsCIFAR` datasets, preparing `<root>/FashionMNIST/raw` on first use (in the
    user's own data folder when `root` is read-only: `prepared_root`); None when Fashion-MNIST is
    turned off or nowhere to be found. FashionMNISTError when it is broken."""
    if disabled():
        return None
    root = prepared_root(root)
    src, raw = source_dir(), raw_dir(root)
    if not has_files(raw):
        if src is None:
            return None
        prepare(src, root)
    try:
        train, test = _read_checked(root, raw)
    except FashionMNISTError as exc:
        raise FashionMNISTError(f"{exc}.\nDelete {raw}: it is made again from the idx files on the "
                                f"next run. {fix_message(src)}") from exc
    return AsCIFAR(train), AsCIFAR(test)
