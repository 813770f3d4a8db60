"""Training on one device: train/evaluate loops, images/s, a History for plots, checkpoint/resume.

`fit()` is what the notebook and the lab call. A checkpoint holds model, optimizer (and scheduler),
epoch, history and every RNG state (python, numpy, torch, CUDA), so that on a CPU with a seed a
resumed run reproduces the uninterrupted run's loss curve exactly. Checkpoints load with
`torch.load(weights_only=True)`: only tensors and plain containers are stored.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from dltutor.core import env
from dltutor.core.device import (autocast, grad_scaler, hardware_label, synchronize, to_device)
from dltutor.core.device import device as default_device
from dltutor.core.train_step import train_step

_FIELDS = ("epoch", "train_loss", "train_acc", "test_loss", "test_acc", "img_per_s", "seconds")


@dataclass
class History:
    """Per-epoch numbers (lists of equal length), per-step losses and honest labels in `meta`."""
    epoch: list = field(default_factory=list)
    train_loss: list = field(default_factory=list)
    train_acc: list = field(default_factory=list)
    test_loss: list = field(default_factory=list)
    test_acc: list = field(default_factory=list)
    img_per_s: list = field(default_factory=list)
    seconds: list = field(default_factory=list)
    step_loss: list = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def append(self, **row):
        for k in _FIELDS:
            getattr(self, k).append(row[k])

    def last(self) -> dict:
        return {k: getattr(self, k)[-1] for k in _FIELDS} if self.epoch else {}

    def __len__(self):
        return len(self.epoch)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "History":
        return cls(**{k: (dict(v) if k == "meta" else list(v)) for k, v in d.items()})

    def save(self, path):
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path) -> "History":
        with open(path) as f:
            return cls.from_dict(json.load(f))


def train_epoch(model, loader, optimizer, device=None, channels_last=False, amp=False,
                scheduler=None, bar=None, max_steps=None) -> dict:
    """One pass over `loader`; returns loss, acc, images, seconds, img_per_s and per-step losses."""
    dev = torch.device(device or default_device())
    model.train()
    scaler = grad_scaler(dev, amp)
    losses, correct, images = [], torch.zeros((), device=dev), 0
    synchronize(dev)
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        if max_steps is not None and step >= max_steps:
            break
        x, y = to_device(x, dev, channels_last), y.to(dev, non_blocking=True)
        loss, out = train_step(model, optimizer, x, y, autocast=lambda: autocast(dev, amp),
                               scaler=scaler)
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.detach())
        correct += (out.argmax(1) == y).sum()
        images += y.shape[0]
        if bar is not None:
            bar.update(1)
            if step % 10 == 0:
                bar.set_postfix(loss=f"{loss.item():.3f}")
    synchronize(dev)
    seconds = time.perf_counter() - t0
    step_loss = torch.stack(losses).float().tolist() if losses else []
    return {"loss": float(np.mean(step_loss)) if step_loss else float("nan"),
            "acc": correct.item() / max(images, 1), "images": images, "seconds": seconds,
            "img_per_s": images / seconds if seconds > 0 else float("nan"), "step_loss": step_loss}


@torch.no_grad()
def evaluate(model, loader, device=None, channels_last=False, amp=False) -> dict:
    """Mean loss and top-1 accuracy over `loader`."""
    device = torch.device(device or default_device())
    model.eval()
    total, correct, n = torch.zeros((), device=device), torch.zeros((), device=device), 0
    for x, y in loader:
        x, y = to_device(x, device, channels_last), y.to(device, non_blocking=True)
        with autocast(device, amp):
            out = model(x)
        total += F.cross_entropy(out.float(), y, reduction="sum")
        correct += (out.argmax(1) == y).sum()
        n += y.shape[0]
    return {"loss": total.item() / max(n, 1), "acc": correct.item() / max(n, 1)}


# ---------------------------------------------------------------- checkpoints
def save_checkpoint(path, model, optimizer, epoch: int, history: History | None = None, scheduler=None):
    """Write model, optimizer, scheduler, epoch, history and RNG states atomically to `path`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": int(epoch),
             "history": (history or History()).to_dict(), "rng": env.rng_state(),
             "scheduler": scheduler.state_dict() if scheduler is not None else None}
    tmp = f"{path}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path, model, optimizer=None, scheduler=None, restore_rng: bool = True,
                    map_location="cpu") -> dict:
    """Load what `save_checkpoint` wrote; returns {'epoch', 'history'} (History object)."""
    state = torch.load(path, map_location=map_location, weights_only=True)
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    if restore_rng:
        env.set_rng_state(state["rng"])
    return {"epoch": state["epoch"], "history": History.from_dict(state["history"])}


# ---------------------------------------------------------------- the loop
def default_optimizer(model, lr: float = 0.05):
    """SGD with Nesterov momentum 0.9 and weight decay 5e-4: the usual CIFAR ResNet recipe."""
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4, nesterov=True)


def make_optimizer(model, lr: float = 0.05, total_steps: int | None = None, warmup_steps: int = 0):
    """`default_optimizer` plus, when `total_steps` is given, a cosine decay stepped every batch;
    with `warmup_steps`, a linear warm-up from lr/10 to `lr` first, then the cosine over the rest."""
    opt = default_optimizer(model, lr)
    if not total_steps:
        return opt, None
    sch = torch.optim.lr_scheduler
    if warmup_steps <= 0:
        return opt, sch.CosineAnnealingLR(opt, T_max=total_steps)
    warm = sch.LinearLR(opt, start_factor=0.1, total_iters=warmup_steps)
    cos = sch.CosineAnnealingLR(opt, T_max=max(1, total_steps - warmup_steps))
    return opt, sch.SequentialLR(opt, [warm, cos], milestones=[warmup_steps])


def fit(model, train_loader, test_loader, epochs: int, optimizer=None, scheduler=None, device=None,
        checkpoint_dir=None, resume: bool = False, progress: bool = True, channels_last=False,
        amp=False, max_steps=None, log=None) -> History:
    """Train for `epochs`, evaluating after each; checkpoint each epoch into `checkpoint_dir`.

    resume=True continues from `<checkpoint_dir>/last.pt` when it exists. `log(str)` (default: print
    when progress is off, else nothing extra) receives one line per epoch.
    """
    from dltutor.data.cifar10 import data_label
    device = torch.device(device or default_device())
    model.to(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)
    optimizer = optimizer or default_optimizer(model)
    ckpt = os.path.join(checkpoint_dir, "last.pt") if checkpoint_dir else None
    history, start = History(), 0
    if resume and ckpt and os.path.exists(ckpt):
        state = load_checkpoint(ckpt, model, optimizer, scheduler, map_location=device)
        history, start = state["history"], state["epoch"] + 1
    history.meta.update(data=data_label(train_loader), hardware=hardware_label(device),
                        device=str(device), fast_mode=env.fast_mode())
    bar = None
    if progress:
        from tqdm.auto import tqdm
        steps = len(train_loader) if max_steps is None else min(max_steps, len(train_loader))
        bar = tqdm(total=(epochs - start) * steps, desc=f"training ({history.meta['data']}, {device.type})",
                   unit="step")
    for epoch in range(start, epochs):
        tr = train_epoch(model, train_loader, optimizer, device, channels_last, amp, scheduler, bar, max_steps)
        ev = evaluate(model, test_loader, device, channels_last, amp)
        history.append(epoch=epoch, train_loss=tr["loss"], train_acc=tr["acc"], test_loss=ev["loss"],
                       test_acc=ev["acc"], img_per_s=tr["img_per_s"], seconds=tr["seconds"])
        history.step_loss.extend(tr["step_loss"])
        line = (f"epoch {epoch + 1}/{epochs}  loss {tr['loss']:.4f}  train acc {tr['acc']:.3f}  "
                f"test acc {ev['acc']:.3f}  {tr['img_per_s']:.0f} img/s  [{history.meta['data']}, "
                f"{history.meta['hardware']}]")
        (log or (bar.write if bar is not None else print))(line)
        if ckpt:
            save_checkpoint(ckpt, model, optimizer, epoch, history, scheduler)
    if bar is not None:
        bar.close()
    return history
