"""Staging CIFAR-10 (or Fashion-MNIST) from a shared copy (no internet on compute nodes), describing what is there.

`python -m dltutor data stage --from DIR` calls `stage(DIR)`: a DIR that holds the four Fashion-MNIST
idx files goes to `fashion_mnist.prepare` (the stand-in used when CIFAR-10 is absent), anything
else to `stage_cifar10(DIR)`. For CIFAR-10, DIR may be the
`cifar-10-batches-py` folder, a folder that holds it, the `cifar-10-python.tar.gz` archive, or a
folder that holds the archive. The copy goes to a temporary folder first and is moved into place
only after torchvision has checked every md5, so a failed copy never leaves a half-staged dataset.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from dltutor.core import env
from dltutor.core.units import GiB
from dltutor.data import fashion_mnist, roots

OFFLINE_ENV = "DLTUTOR_OFFLINE"
BASE_FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"


class CorruptDataError(RuntimeError):
    """A local CIFAR-10 copy exists but fails torchvision's integrity (md5) check."""


def cifar10_dir(root=None):
    return os.path.join(env.data_dir() if root is None else root, BASE_FOLDER)


def fix_message(root) -> str:
    """The two ways to get the real CIFAR-10 into `root`."""
    return (f"To use the real CIFAR-10 in {root}, either\n"
            f"  1. stage a shared copy:  python -m dltutor data stage --from DIR\n"
            f"     (DIR holds {BASE_FOLDER}/ or {ARCHIVE}), or\n"
            f"  2. download it on a node with internet (e.g. a login node), same DLTUTOR_DATA:\n"
            f"     python -c \"from dltutor.data.cifar10 import download_cifar10; download_cifar10()\"")


def _torchvision_cifar(root, train):
    from torchvision.datasets import CIFAR10  # looked up at call time, so tests can patch md5s
    return CIFAR10(root=str(root), train=train, download=False)


def load_verified(root):
    """(train, test) torchvision CIFAR10 datasets of `root`, every md5 checked; CorruptDataError if not."""
    try:
        return _torchvision_cifar(root, True), _torchvision_cifar(root, False)
    except RuntimeError as exc:
        raise CorruptDataError(
            f"{exc}\n{cifar10_dir(root)} exists but failed torchvision's integrity (md5) check.\n"
            f"Delete it and get a clean copy. {fix_message(root)}") from exc




def _find_source(src: Path):
    """('dir', path to cifar-10-batches-py) or ('archive', path to the .tar.gz)."""
    if src.is_file():
        return "archive", src
    if src.name == BASE_FOLDER and src.is_dir():
        return "dir", src
    if (src / BASE_FOLDER).is_dir():
        return "dir", src / BASE_FOLDER
    if (src / ARCHIVE).is_file():
        return "archive", src / ARCHIVE
    raise FileNotFoundError(f"no CIFAR-10 in {src}: expected {BASE_FOLDER}/ or {ARCHIVE} "
                            f"(the python version from https://www.cs.toronto.edu/~kriz/cifar.html), "
                            f"or the four Fashion-MNIST idx files ({', '.join(fashion_mnist.FILES)})")


def verify(root) -> None:
    """Let torchvision check every md5 of `<root>/cifar-10-batches-py`; CorruptDataError if not."""
    load_verified(root)


def stage_cifar10(src, dest=None) -> str:
    """Copy CIFAR-10 from `src` into `dest` (default: the data dir, or the user's own when that
    is read-only: dltutor.data.roots), verify it, return the folder."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity, extract_archive
    src = Path(src).expanduser().resolve()
    dest = Path(roots.for_writing(env.data_dir()) if dest is None else dest).expanduser().resolve()
    kind, path = _find_source(src)
    final = dest / BASE_FOLDER
    if kind == "dir" and path == final:
        verify(dest)
        return str(final)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".staging-") as tmp:
        if kind == "archive":
            if not check_integrity(str(path), CIFAR10.tgz_md5):
                raise CorruptDataError(f"{path} fails torchvision's md5 check ({CIFAR10.tgz_md5}): "
                                       f"incomplete or not CIFAR-10.\n{fix_message(dest)}")
            extract_archive(str(path), tmp)
        else:
            shutil.copytree(path, Path(tmp) / BASE_FOLDER)
        verify(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(Path(tmp) / BASE_FOLDER, final)
    return str(final)


def stage(src, dest=None) -> tuple:
    """(what, folder): Fashion-MNIST when `src` is a folder of its idx files, else CIFAR-10."""
    path = Path(src).expanduser().resolve()
    if path.is_dir() and fashion_mnist.has_files(path):
        dest = Path(roots.for_writing(env.data_dir()) if dest is None else dest).expanduser().resolve()
        return fashion_mnist.LABEL, str(fashion_mnist.prepare(path, dest, replace=True))
    return "CIFAR-10", stage_cifar10(path, dest)


def fashion_status(root) -> str:
    """Where the Fashion-MNIST stand-in comes from, or why there is none."""
    if fashion_mnist.disabled():
        return f"turned off ({fashion_mnist.ENV}=none)"
    raw, src = fashion_mnist.raw_dir(fashion_mnist.prepared_root(root)), fashion_mnist.source_dir()
    if fashion_mnist.has_files(raw):
        return f"prepared in {raw}"
    if src is not None:
        return f"available in {src} (prepared on first use)"
    return f"not installed (sudo apt-get install {fashion_mnist.DEBIAN_PACKAGE}, or {fashion_mnist.ENV}=DIR)"


def describe(root=None) -> dict:
    """Data dir, whether all CIFAR-10 files are there (no md5 pass: that is `verify`), free space,
    the Fashion-MNIST stand-in's status and what the course trains on without CIFAR-10 (`fallback`)."""
    from torchvision.datasets import CIFAR10
    root = Path(env.data_dir() if root is None else root)
    folder = root / BASE_FOLDER
    names = [n for n, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]
    missing = [n for n in names if not (folder / n).is_file()]
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    fashion = fashion_status(root)
    return {"data_dir": str(root), "cifar10_dir": str(folder), "staged": not missing,
            "missing": missing if folder.exists() else ["all"], "fashion_mnist": fashion,
            "fallback": fashion_mnist.LABEL if fashion.startswith(("prepared", "available")) else "SYNTHETIC",
            "free_gb": round(shutil.disk_usage(probe).free / GiB, 1), "offline": env.offline()}
