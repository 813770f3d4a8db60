"""The synthetic stand-ins, used only when no real data is there, and always labelled so.

`SyntheticCIFAR10(n)` is CIFAR-10-shaped (32x32 RGB uint8, 10 classes): each class has its own
colour layout and stripe pattern, hidden among look-alike distractor patterns and noise, so that a
network needs several epochs to learn it (not one, as with a plain template task). It is NOT CIFAR-10;
its `source` is "SYNTHETIC" and every title and printout made by dltutor says so.
`synthetic_images(n, shape)` is a fixed random batch for throughput benchmarks (lab 03).
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

SYNTHETIC = "SYNTHETIC"


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


def _shift(img: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each image rolled (wrapping) by its own (rows, cols) offset."""
    idx = np.arange(32)
    rows = (idx[None, :] + offsets[:, :1]) % 32
    cols = (idx[None, :] + offsets[:, 1:]) % 32
    k = np.arange(len(img))[:, None, None]
    return img[k, rows[:, :, None], cols[:, None, :]]


class SyntheticCIFAR10(Dataset):
    """CIFAR-10-shaped (32x32 RGB uint8, 10 classes), learnable but NOT separable at a glance.

    Each image = its class's pattern at a random strength (`signal`), plus `distractors` patterns
    of the same kind that belong to no class, at random strengths and signs, shifted (wrapping,
    up to +-8 pixels), with per-pixel `noise`. A network has to learn which of the look-alike
    patterns carry the class, which takes several epochs. It is NOT CIFAR-10."""

    source = SYNTHETIC
    synthetic = True

    def __init__(self, n: int, num_classes: int = 10, seed: int = 0, noise: float = 0.8,
                 signal=(0.4, 1.0), distractors: int = 2, distractor_scale: float = 0.5):
        rng = np.random.default_rng(seed)
        templates = _class_templates(num_classes + distractors)
        self.targets = rng.permutation(np.arange(n) % num_classes).tolist()
        self.classes = [f"pattern {c}" for c in range(num_classes)]
        self.data = np.empty((n, 32, 32, 3), np.uint8)
        for start in range(0, n, 2048):
            labels = np.asarray(self.targets[start:start + 2048])
            k = len(labels)
            img = templates[labels] * rng.uniform(*signal, (k, 1, 1, 1))
            mix = rng.normal(0, distractor_scale, (k, distractors))
            img = img + np.einsum("kd,dhwc->khwc", mix, templates[num_classes:])
            img = _shift(img, rng.integers(-8, 9, (k, 2)))
            img = img + rng.normal(0, noise, img.shape)
            self.data[start:start + k] = np.clip(128 + 50 * img, 0, 255).astype(np.uint8)

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
