"""Models for the course: a ResNet for 32x32 CIFAR images, torchvision's ResNet-50, parameter counts.

`cifar_resnet(width=64)` is the ResNet-18 layout adapted to 32x32 inputs (3x3 stem, no max-pool,
four stages of two basic blocks, widths w, 2w, 4w, 8w): about 11.2 M parameters. `width=8` gives a
~0.18 M-parameter model that trains in seconds on a CPU (fast mode).
"""
from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a shortcut (1x1 conv when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    def __init__(self, width: int = 64, blocks=(2, 2, 2, 2), num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            for j in range(n):
                layers.append(BasicBlock(cin, cout, stride=2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def cifar_resnet(width: int = 64, blocks=(2, 2, 2, 2), num_classes: int = 10) -> CifarResNet:
    """ResNet-18-style network for 32x32 images; `width` scales every stage (64 = ResNet-18)."""
    return CifarResNet(width=width, blocks=tuple(blocks), num_classes=num_classes)


def resnet50(num_classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-50 with random weights (never downloads pretrained weights)."""
    from torchvision.models import resnet50 as tv_resnet50
    return tv_resnet50(weights=None, num_classes=num_classes)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameter elements."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
