"""CIFAR-10 for the course: the real torchvision dataset, else a labelled stand-in (Fashion-MNIST or SYNTHETIC).

`load_cifar10()` decides in this order:
1. `<data dir>/cifar-10-batches-py` is there: torchvision loads it and checks every md5. A corrupt
   copy raises `CorruptDataError` (torchvision's message plus how to fix it); it is never replaced
   silently.
2. Not there and downloads are allowed (not `DLTUTOR_OFFLINE=1`, not `download=False`): a short
   reachability probe, then torchvision's download with a socket timeout, so it never hangs.
3. Otherwise ONE message names both fixes (`python -m dltutor data stage --from DIR`, or downloading
   on a node with internet) and says which stand-in is used:
   a. the REAL Fashion-MNIST (`dltutor.data.fashion_mnist`: Debian's `dataset-fashion-mnist` or
      `DLTUTOR_FASHION_MNIST=DIR`), shown CIFAR-shaped (3x32x32, 10 classes): a different data set,
      `info["source"] == "Fashion-MNIST"`, labelled "Fashion-MNIST (stand-in for CIFAR-10)";
   b. when that is absent or turned off (`DLTUTOR_FASHION_MNIST=none`, `fashion_mnist=False`): a
      learnable SYNTHETIC dataset of the same shape, `info["source"] == "SYNTHETIC"`.
   Every printout and title made by dltutor names the data (`data_label`).

Staging (copying a shared copy, e.g. on a cluster file system) and the md5 check live in
`dltutor.data.staging`; the stand-in in `dltutor.data.synthetic`; loaders in `dltutor.data.loaders`.
"""
from __future__ import annotations

import os
import socket

import torch
from torch.utils.data import Subset

from dltutor.core import env
from dltutor.data import fashion_mnist, roots
from dltutor.data.staging import (ARCHIVE, OFFLINE_ENV, cifar10_dir, fix_message, load_verified,
                                  stage_cifar10)
from dltutor.data.synthetic import SYNTHETIC, SyntheticCIFAR10

CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)
REAL = "cifar10"
DOWNLOAD_HOST = "www.cs.toronto.edu"
FASHION = fashion_mnist.FASHION
LABELS = {REAL: "CIFAR-10", SYNTHETIC: SYNTHETIC, FASHION: fashion_mnist.LABEL}
STATS = {FASHION: (fashion_mnist.MEAN, fashion_mnist.STD)}   # normalisation; CIFAR-10's otherwise


def download_cifar10(root=None, timeout: float = 60.0, probe_timeout: float = 5.0) -> str:
    """Download CIFAR-10 with torchvision into `root` (default: the data dir); returns the folder.

    Raises OSError quickly when the host cannot be reached; a stalled transfer fails after `timeout`.
    The default is the data dir when this user may write it, else their own (dltutor.data.roots).
    """
    root = str(roots.for_writing(env.data_dir()) if root is None else root)
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


def _stand_in(root, reason, n_train, n_test, seed, fashion):
    """(train, test, NOTE text) when CIFAR-10 is not there: Fashion-MNIST, else SYNTHETIC."""
    head = f"NOTE: CIFAR-10 not found in {root} ({reason})."
    pair = fashion_mnist.load(root) if fashion is not False else None
    if pair is not None:
        return (*pair, f"{head}\nUsing the REAL Fashion-MNIST instead, labelled \"{fashion_mnist.LABEL}\": "
                       f"a different data set (greyscale clothing, padded to 3x32x32, 10 classes): "
                       f"accuracies below are Fashion-MNIST results, NOT CIFAR-10 results.")
    why = ("turned off" if fashion is False or fashion_mnist.disabled() else
           f"not installed: sudo apt-get install {fashion_mnist.DEBIAN_PACKAGE}, or set "
           f"{fashion_mnist.ENV}=DIR")
    return (SyntheticCIFAR10(n_train or 50000, seed=seed), SyntheticCIFAR10(n_test or 10000, seed=seed + 1),
            f"{head}\nUsing a SYNTHETIC CIFAR-10-shaped stand-in (3x32x32, 10 classes; the real "
            f"Fashion-MNIST stand-in is {why}): accuracies below are NOT CIFAR-10 results.")


def load_cifar10(root=None, download=None, train_subset=None, test_subset=None, seed: int = 0,
                 quiet: bool = False, fashion_mnist: bool | None = None):
    """Return `(train_ds, test_ds, info)`; items are `(PIL image, int label)`.

    download: None = try when not offline (`DLTUTOR_OFFLINE`), False = never, True = try even then.
    fashion_mnist: None = use the Fashion-MNIST stand-in unless `DLTUTOR_FASHION_MNIST=none`,
    False = never (CIFAR-10 or SYNTHETIC).
    info: source ('cifar10' | 'Fashion-MNIST' | 'SYNTHETIC'), label (`data_label`), root, sizes,
    classes, reason (why not CIFAR-10).
    """
    given = env.data_dir() if root is None else root
    # read where it is; what is made here (unpacked, downloaded) goes to the user's own data folder
    # when `given` is read-only (a class's shared set-up): dltutor.data.roots
    root = roots.holding(given, lambda r: os.path.isdir(cifar10_dir(r)))
    folder = cifar10_dir(root)
    reason = None
    if not os.path.isdir(folder) and os.path.isfile(os.path.join(given, ARCHIVE)):
        stage_cifar10(os.path.join(given, ARCHIVE), dest=root)
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
        root = given
        train, test, note = _stand_in(root, reason, train_subset, test_subset, seed, fashion_mnist)
        if not quiet:
            print(f"{note}\n{fix_message(root)}", flush=True)
    train, test = _subset(train, train_subset, seed), _subset(test, test_subset, seed + 1)
    info = {"source": train.source, "label": data_label(train), "root": str(root), "train_size": len(train),
            "test_size": len(test), "classes": list(getattr(train, "dataset", train).classes), "reason": reason}
    return train, test, info


def source_of(obj) -> str:
    """'cifar10', 'Fashion-MNIST' or 'SYNTHETIC' for a dataset, a loader or an info dict."""
    return obj.get("source") if isinstance(obj, dict) else getattr(getattr(obj, "dataset", obj), "source", REAL)


def data_label(obj) -> str:
    """'CIFAR-10', 'Fashion-MNIST (stand-in for CIFAR-10)' or 'SYNTHETIC' for a dataset, a loader
    or an info dict: the name every printout and title uses."""
    src = source_of(obj)
    return LABELS.get(src, src)


def norm_stats(obj) -> tuple:
    """(mean, std) per channel to normalise the data `obj` holds (its own, or CIFAR-10's)."""
    return STATS.get(source_of(obj), (MEAN, STD))
