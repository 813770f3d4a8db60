"""Training-loop overhead: dltutor.single.train.train_epoch vs a plain PyTorch loop, same model, same data.

    .venv/bin/python bench/bench_train_loop.py                  # width 16, batch 64, 5 rounds
    .venv/bin/python bench/bench_train_loop.py --width 8 --steps 10 --rounds 7

Both sides train the same model (one instance, so weights and caches are shared) on the same
batches, which are held in memory so only the loop itself differs. Rounds alternate
(D P P D D P ...) so drift on a shared machine hits both alike. The figure is the ratio of the
median images/s, dltutor / plain (goal >= 0.97).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dltutor.core import env  # noqa: E402
from dltutor.core.device import device as pick_device  # noqa: E402
from dltutor.core.device import hardware_label  # noqa: E402
from dltutor.data.synthetic import synthetic_images  # noqa: E402
from dltutor.single import models, train  # noqa: E402


def plain_loop(model, batches, optimizer, device):
    """What a PyTorch tutorial writes, nothing more."""
    model.train()
    t0 = time.perf_counter()
    n = 0
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        n += y.shape[0]
    if device.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t0)


def dltutor_loop(model, batches, optimizer, device):
    return train.train_epoch(model, batches, optimizer, device)["img_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=12, help="steps per round")
    p.add_argument("--rounds", type=int, default=5, help="rounds per side")
    a = p.parse_args()
    env.seed_everything(0)
    device = pick_device()
    x, y = synthetic_images(a.batch_size * a.steps, (3, 32, 32), 10, device=device)
    batches = list(zip(x.split(a.batch_size), y.split(a.batch_size)))
    model = models.cifar_resnet(width=a.width).to(device)
    opt = train.default_optimizer(model)
    plain_loop(model, batches[:2], opt, device)  # warm-up (allocator, kernels)
    results = {"dltutor": [], "plain": []}
    order = ["dltutor", "plain", "plain", "dltutor"] * ((a.rounds + 1) // 2)
    for side in order[:2 * a.rounds]:
        fn = dltutor_loop if side == "dltutor" else plain_loop
        results[side].append(fn(model, batches, opt, device))
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"ResNet width {a.width}, batch {a.batch_size}, {a.steps} steps x {a.rounds} rounds per side, "
          f"{device} [{hardware_label()}]")
    for k in ("plain", "dltutor"):
        print(f"  {k:<8} median {med[k]:8.1f} img/s   rounds: {', '.join(f'{v:.0f}' for v in results[k])}")
    print(f"ratio dltutor / plain = {med['dltutor'] / med['plain']:.3f}  (goal >= 0.97)")


if __name__ == "__main__":
    main()
