"""Where a data set is read, and where one made on first use is written.

The data folder (`env.data_dir()`: `DLTUTOR_DATA`, else `<cache>/data`) belongs to the set-up and
may be shared by a class, read-only for the students. What the set-up prepared there is read there.
What is made on first use (the Fashion-MNIST idx files unzipped into torchvision's layout, CIFAR-10
downloaded or unpacked from its archive, `data stage` without `--dest`) goes into that folder when
this user may write it, else into the user's own `<user_dir>/data`, where it is found next time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from dltutor.core import env


def own_data_dir() -> Path:
    """The user's own data folder, `<user_dir>/data` (made when first written)."""
    return env.user_dir() / "data"


def for_writing(root) -> Path:
    """`root` when this user may write it, else their own data folder."""
    return Path(root) if env.writable(root) else own_data_dir()


def holding(root, present: Callable[[Path], bool]) -> Path:
    """Where a data set is read or made: `root` when it is there (`present(root)`) or this user may
    write it, else the user's own data folder (where it is, or is to be made)."""
    root = Path(root)
    return root if present(root) or env.writable(root) else own_data_dir()
