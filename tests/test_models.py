"""dltutor.single.models: output shapes and parameter counts."""
import torch

from dltutor.single import models


def test_cifar_resnet18_shape_and_size():
    m = models.cifar_resnet(width=64)
    assert models.count_parameters(m) == 11_173_962  # the CIFAR ResNet-18 of the literature
    m.eval()
    with torch.no_grad():
        assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_width_knob_makes_a_tiny_model():
    tiny = models.cifar_resnet(width=8)
    n = models.count_parameters(tiny)
    assert 100_000 < n < 300_000, n
    assert models.count_parameters(models.cifar_resnet(width=16)) > 3 * n  # ~ width squared
    assert tiny(torch.randn(3, 3, 32, 32)).shape == (3, 10)
    shallow = models.cifar_resnet(width=8, blocks=(1, 1), num_classes=4)
    assert shallow(torch.randn(2, 3, 32, 32)).shape == (2, 4)


def test_count_parameters_trainable_only():
    m = models.cifar_resnet(width=8)
    total = models.count_parameters(m)
    for p in m.stem.parameters():
        p.requires_grad_(False)
    frozen = sum(p.numel() for p in m.stem.parameters())
    assert models.count_parameters(m) == total - frozen
    assert models.count_parameters(m, trainable_only=False) == total


def test_resnet50_random_weights():
    m = models.resnet50()
    assert models.count_parameters(m) == 25_557_032
    m.eval()
    with torch.no_grad():
        assert m(torch.randn(1, 3, 64, 64)).shape == (1, 1000)
