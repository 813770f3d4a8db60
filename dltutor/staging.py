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

from dltutor import env


def _find_source(src: Path):
    """('dir', path to cifar-10-batches-py) or ('archive', path to the .tar.gz)."""
    from dltutor import data as _data
    if src.is_file():
        return "archive", src
    if src.name == _data.BASE_FOLDER and src.is_dir():
        return "dir", src
    if (src / _data.BASE_FOLDER).is_dir():
        return "dir", src / _data.BASE_FOLDER
    if (src / _data.ARCHIVE).is_file():
        return "archive", src / _data.ARCHIVE
    raise FileNotFoundError(f"no CIFAR-10 in {src}: expected {_data.BASE_FOLDER}/ or {_data.ARCHIVE} "
                            f"(the python version from https://www.cs.toronto.edu/~kriz/cifar.html)")


def verify(root) -> None:
    """Let torchvision check every md5 of `<root>/cifar-10-batches-py`; _data.CorruptDataError if not."""
    from dltutor import data as _data
    _data._load_real(root)


def stage_cifar10(src, dest=None) -> str:
    """Copy CIFAR-10 from `src` into `dest` (default: the data dir), verify it, return the folder."""
    from dltutor import data as _data
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity, extract_archive
    src = Path(src).expanduser().resolve()
    dest = Path(env.data_dir() if dest is None else dest).expanduser().resolve()
    kind, path = _find_source(src)
    final = dest / _data.BASE_FOLDER
    if kind == "dir" and path == final:
        verify(dest)
        return str(final)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".staging-") as tmp:
        if kind == "archive":
            if not check_integrity(str(path), CIFAR10.tgz_md5):
                raise _data.CorruptDataError(f"{path} fails torchvision's md5 check ({CIFAR10.tgz_md5}): "
                                       f"incomplete or not CIFAR-10.\n{_data.fix_message(dest)}")
            extract_archive(str(path), tmp)
        else:
            shutil.copytree(path, Path(tmp) / _data.BASE_FOLDER)
        verify(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(Path(tmp) / _data.BASE_FOLDER, final)
    return str(final)


def describe(root=None) -> dict:
    """Data dir, whether all CIFAR-10 files are there (no md5 pass: that is `verify`), free space."""
    from dltutor import data as _data
    from torchvision.datasets import CIFAR10
    root = Path(env.data_dir() if root is None else root)
    folder = root / _data.BASE_FOLDER
    names = [n for n, _ in CIFAR10.train_list + CIFAR10.test_list] + [CIFAR10.meta["filename"]]
    missing = [n for n in names if not (folder / n).is_file()]
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return {"data_dir": str(root), "cifar10_dir": str(folder), "staged": not missing,
            "missing": missing if folder.exists() else ["all"],
            "free_gb": round(shutil.disk_usage(probe).free / 2**30, 1), "offline": _data.offline()}
