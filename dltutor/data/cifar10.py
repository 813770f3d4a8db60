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

Staging (copying a shared copy, e.g. on a cluster file system) and the md5 check live in
`dltutor.data.staging`; the stand-in in `dltutor.data.synthetic`; loaders in `dltutor.data.loaders`.
"""
from __future__ import annotations

import os
import socket

import torch
from torch.utils.data import Subset

from dltutor.core import env
from dltutor.data.staging import (ARCHIVE, OFFLINE_ENV, cifar10_dir, fix_message, load_verified,
                                  stage_cifar10)
from dltutor.data.synthetic import SYNTHETIC, SyntheticCIFAR10

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
REAL = "cifar10"
DOWNLOAD_HOST = "www.cs.toronto.edu"


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
        allowed = (not env.offline()) if download is None else bool(download)
        if not allowed:
            reason = f"offline: {OFFLINE_ENV}=1" if env.offline() else "download=False"
        else:
            try:
                download_cifar10(root)
            except Exception as exc:  # no route, DNS, timeout, HTTP error: fall back, say why
                reason = f"download failed: {type(exc).__name__}: {exc}"
    if reason is None:
        train, test = load_verified(root)
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
