"""Feeding a model: DataLoaders with the standard CIFAR transforms, or tensors kept on the device.

Each data set is normalised with its own mean/std (`cifar10.norm_stats`: CIFAR-10's, or
Fashion-MNIST's for that stand-in). `make_loaders` decodes and augments in worker processes (pinned memory on GPUs);
`to_device_tensors` / `DeviceLoader` / `device_loaders` keep the whole (small) data set on the
device and augment there, so no step waits for a copy.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from dltutor.core.device import device as default_device
from dltutor.data.cifar10 import MEAN, REAL, STD, norm_stats, source_of


class _Transformed(Dataset):
    def __init__(self, ds, transform):
        self.ds, self.transform, self.source = ds, transform, source_of(ds)

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        img, y = self.ds[i]
        return self.transform(img), y


def transforms(augment: bool, stats=(MEAN, STD)):
    """The standard CIFAR pipeline: (random crop 32 pad 4 + flip when `augment`), to tensor,
    normalise with `stats` = (mean, std)."""
    from torchvision import transforms as T
    steps = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()] if augment else []
    return T.Compose(steps + [T.ToTensor(), T.Normalize(*stats)])


def make_loaders(train_ds, test_ds, batch_size: int = 128, workers: int = 2, augment: bool = True,
                 test_batch_size=None, pin_memory=None, drop_last: bool = True):
    """DataLoaders with the standard CIFAR transforms; `workers` processes decode and augment."""
    from torch.utils.data import DataLoader
    pin = torch.cuda.is_available() if pin_memory is None else pin_memory
    extra = {"persistent_workers": False, "prefetch_factor": 4} if workers > 0 else {}
    stats = norm_stats(train_ds)
    train = DataLoader(_Transformed(train_ds, transforms(augment, stats)), batch_size=batch_size,
                       shuffle=True, num_workers=workers, pin_memory=pin, drop_last=drop_last, **extra)
    test = None if test_ds is None else DataLoader(
        _Transformed(test_ds, transforms(False, stats)), batch_size=test_batch_size or 2 * batch_size,
        shuffle=False, num_workers=workers, pin_memory=pin, **extra)
    return train, test


def _raw(ds):
    """(uint8 N x 32 x 32 x 3 array, int64 labels) of a CIFAR-like dataset or a Subset of one."""
    if isinstance(ds, Subset):
        data, targets = _raw(ds.dataset)
        return data[ds.indices], targets[ds.indices]
    data = np.asarray(ds.data)
    if not data.flags.writeable:  # a broadcast view (Fashion-MNIST's repeated grey channel): copy it
        data = np.ascontiguousarray(data)
    return data, np.asarray(ds.targets, dtype=np.int64)


def to_device_tensors(ds, device=None):
    """The whole dataset as float tensors resident on `device`, normalised with its own
    `norm_stats`: `(x, y)`."""
    device = default_device() if device is None else device
    data, targets = _raw(ds)
    x = torch.from_numpy(data).to(device).permute(0, 3, 1, 2).float().div_(255)
    stats = norm_stats(ds)
    mean = torch.tensor(stats[0], device=device).view(1, 3, 1, 1)
    std = torch.tensor(stats[1], device=device).view(1, 3, 1, 1)
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
        off = torch.randint(0, 9, (2, b), device=dev)   # drawn on the device: no copy, no wait
        ar = torch.arange(32, device=dev)
        rows, cols = (off[0][:, None] + ar)[:, :, None], (off[1][:, None] + ar)[:, None, :]
        out = padded.permute(0, 2, 3, 1)[torch.arange(b, device=dev)[:, None, None], rows, cols]
        out = out.permute(0, 3, 1, 2)
        flip = torch.rand(b, device=dev) < 0.5
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
    src = source_of(train_ds)
    xtr, ytr = to_device_tensors(train_ds, device)
    xte, yte = to_device_tensors(test_ds, device)
    return (DeviceLoader(xtr, ytr, batch_size, True, augment, source=src),
            DeviceLoader(xte, yte, 2 * batch_size, False, False, drop_last=False, source=src))
