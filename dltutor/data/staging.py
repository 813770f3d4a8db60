"""Staging CIFAR-10 from a shared copy (no internet on compute nodes) and describing what is staged.

`python -m dltutor data stage --from DIR` calls `stage_cifar10(DIR)`. DIR may be the
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
                            f"(the python version from https://www.cs.toronto.edu/~kriz/cifar.html)")


def verify(root) -> None:
    """Let torchvision check every md5 of `<root>/cifar-10-batches-py`; CorruptDataError if not."""
    load_verified(root)


def stage_cifar10(src, dest=None) -> str:
    """Copy CIFAR-10 from `src` into `dest` (default: the data dir), verify it, return the folder."""
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity, extract_archive
    src = Path(src).expanduser().resolve()
    dest = Path(env.data_dir() if dest is None else dest).expanduser().resolve()
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


def describe(root=None) -> dict:
    """Data dir, whether all CIFAR-10 files are there (no md5 pass: that is `verify`), free space."""
    from torchvision.datasets import CIFAR10
    root = Path(env.data_dir() if root is None else root)
    folder = root / BASE_FOLDER
    names = [n for n, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]
    missing = [n for n in names if not (folder / n).is_file()]
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return {"data_dir": str(root), "cifar10_dir": str(folder), "staged": not missing,
            "missing": missing if folder.exists() else ["all"],
            "free_gb": round(shutil.disk_usage(probe).free / GiB, 1), "offline": env.offline()}
