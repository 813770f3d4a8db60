"""The real Fashion-MNIST images the I/O lessons write out (never a synthetic stand-in).

Where the idx files are, and their unzipping into torchvision's layout, is dltutor.data.fashion_mnist's
job (`$DLTUTOR_FASHION_MNIST`, else Debian's dataset-fashion-mnist); torchvision's FashionMNIST reads
them. Here we only take the first n 28 x 28 images as they are (no padding, no CIFAR shape).
"""
from __future__ import annotations

import numpy as np

from dltutor.core import env
from dltutor.data import fashion_mnist as fm

NAME = fm.FASHION


def _root():
    """`<DLTUTOR_DATA>` with `FashionMNIST/raw` filled from the idx files on first use (the user's
    own data folder when that one is read-only and has not got them: `fm.prepared_root`)."""
    root = fm.prepared_root(env.data_dir())
    if fm.has_files(fm.raw_dir(root)):
        return root
    src = None if fm.disabled() else fm.source_dir()
    if src is None or not fm.has_files(src):
        raise fm.FashionMNISTError(
            "The I/O lessons read the real Fashion-MNIST and have no stand-in, but its idx files "
            f"are not found ({fm.ENV}={fm.source_dir() if not fm.disabled() else 'none'}). "
            f"Install them with `sudo apt-get install {fm.DEBIAN_PACKAGE}`, or point {fm.ENV}=DIR "
            "at a folder holding the four idx files.")
    fm.prepare(src, root)
    return root


def load(n: int, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """The first `n` images (n x 28 x 28 uint8) and labels (int64) of Fashion-MNIST's `split`."""
    from torchvision.datasets import FashionMNIST
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', not {split!r}")
    ds = FashionMNIST(str(_root()), train=split == "train", download=False)
    if not 1 <= n <= len(ds):
        raise ValueError(f"n={n}: Fashion-MNIST {split} has {len(ds)} images; give 1..{len(ds)}")
    return (np.ascontiguousarray(ds.data[:n].numpy()), ds.targets[:n].numpy().astype(np.int64))
