"""Large global batches, measured: test accuracy vs batch size, and steps to a target accuracy.

A global batch B on W ranks with averaged gradients is ONE step of SGD on B images (tests/test_ddp.py
checks it), so the study runs in one process: `global_batches(..., world_size=W)` even groups the
images exactly as W ranks of lab 02 do (DistributedSampler, drop_last), so the lab on W ranks
(`--model cnn`) reproduces a run of the study up to float rounding (tests/test_batch_study.py).

Each run trains `small_cnn` with SGD for `epochs` passes (a fixed budget of epochs: a k times larger
batch takes k times fewer steps) under one LR policy (`POLICIES`):
  fixed          lr = base_lr whatever the batch;
  scaled         the linear scaling rule, lr = base_lr x B / base_batch (`scaling.scaled_lr`);
  scaled+warmup  the same peak LR, reached by a linear ramp from base_lr over `warmup_epochs`
                 (Goyal et al.; `scaling.warmup_scheduler`).
`sweep` returns one row per (batch, policy): test and training accuracy at the end of the budget
(a test gap with the training accuracy as low is too few steps; with it high, a generalization
gap), and, for `target_policies`, the optimizer steps until the test accuracy first reaches
`target` (`steps_to_target`; runs go on up to `max_epochs` to get there). Perfect scaling
halves the steps when the batch doubles; `batch_report.scaling_rows` compares each batch with that ideal.
"""
from __future__ import annotations

import math
import time

POLICIES = {"fixed": (False, False), "scaled": (True, False), "scaled+warmup": (True, True)}
POLICY_TEXT = {"fixed": "no LR scaling", "scaled": "linear scaling rule",
               "scaled+warmup": "linear scaling + warm-up"}


def small_cnn(num_classes: int = 10, width: int = 16):
    """A small CNN (no batch norm, so a step depends only on the global batch, not on how it is
    split over ranks): 2x2 average pool to 16x16, two conv+pool stages, two linear layers."""
    from torch import nn
    return nn.Sequential(
        nn.AvgPool2d(2),
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 16, 64), nn.ReLU(), nn.Linear(64, num_classes))


# ---------------------------------------------------------------- pieces
def lr_plan(policy: str, base_lr: float, batch: int, base_batch: int, steps_per_epoch: int,
            warmup_epochs: float) -> tuple[float, int, float]:
    """`(peak_lr, warmup_steps, start_factor)` of `policy` for a global batch `batch`."""
    from dltutor.ddp.scaling import scaled_lr
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    scale, warm = POLICIES[policy]
    peak = scaled_lr(base_lr, global_batch=batch, base_batch=base_batch) if scale else float(base_lr)
    steps = max(1, round(warmup_epochs * steps_per_epoch)) if warm and peak > base_lr else 0
    return peak, steps, base_lr / peak


def steps_to_target(curve, target: float):
    """First step of `curve` [(step, accuracy), ...] whose accuracy is >= `target`; None if none."""
    return next((step for step, acc in curve if acc >= target), None)


def global_batches(n: int, batch: int, world_size: int, seed: int, epoch: int):
    """Index tensors of each global batch of one epoch, exactly as `world_size` ranks with
    DistributedSampler(shuffle, seed, drop_last) and per-rank batch batch/world_size see them."""
    import torch
    if batch % world_size:
        raise ValueError(f"global batch {batch} does not split over {world_size} ranks")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))
    per_rank, total = batch // world_size, n - n % world_size
    shards = [perm[r:total:world_size] for r in range(world_size)]
    for i in range(len(shards[0]) // per_rank):
        yield torch.cat([s[i * per_rank:(i + 1) * per_rank] for s in shards])


def accuracy(model, x, y, batch: int = 1000) -> float:
    """Fraction of (x, y) the model classifies right (eval mode, no gradients)."""
    import torch
    model.eval()
    with torch.no_grad():
        right = sum(int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
                    for i in range(0, len(x), batch))
    model.train()
    return right / len(x)


# ---------------------------------------------------------------- one run
def train_run(data, batch: int, policy: str, *, base_lr: float, base_batch: int, epochs: int,
              warmup_epochs: float = 1.0, max_epochs: int | None = None, target: float | None = None,
              evals_per_epoch: int = 4, momentum: float = 0.9, weight_decay: float = 5e-4,
              world_size: int = 1, seed: int = 0, width: int = 16) -> dict:
    """Train one model on `data` = (x, y, x_test, y_test); returns its row (see `sweep`).

    Stops after `epochs`, or, when `target` is given, when the test accuracy reaches it (but not
    before `epochs`) or after `max_epochs`. The test accuracy is measured every
    1/`evals_per_epoch` epoch (at least every step) and at the end of the budget.
    """
    import torch
    from dltutor.core.train_step import train_step
    from dltutor.ddp.scaling import warmup_scheduler
    x, y, xt, yt = data
    steps_per_epoch = (len(x) - len(x) % world_size) // world_size // (batch // world_size)
    if steps_per_epoch < 1:
        raise ValueError(f"{len(x)} training images give no full global batch of {batch}")
    peak, warm, start = lr_plan(policy, base_lr, batch, base_batch, steps_per_epoch, warmup_epochs)
    torch.manual_seed(seed)  # the same initial weights for every run (and as lab 02 makes them)
    model = small_cnn(width=width).to(x.device)
    opt = torch.optim.SGD(model.parameters(), lr=peak, momentum=momentum, weight_decay=weight_decay)
    sched = warmup_scheduler(opt, warm, start)
    every = max(1, steps_per_epoch // evals_per_epoch)
    budget, last = epochs * steps_per_epoch, (max_epochs or epochs) * steps_per_epoch
    losses, lrs, curve, step, acc, t0 = [], [], [], 0, None, time.perf_counter()
    train_acc = None   # on the training images, at the end of the budget (or at divergence)
    diverged = reached = False
    for epoch in range(max_epochs or epochs):
        for idx in global_batches(len(x), batch, world_size, seed, epoch):
            lrs.append(opt.param_groups[0]["lr"])
            loss, _ = train_step(model, opt, x[idx], y[idx])
            sched.step()
            step += 1
            losses.append(loss.item())
            diverged = not math.isfinite(losses[-1])
            if step % every == 0 or step in (budget, last) or diverged:
                curve.append((step, accuracy(model, xt, yt)))
            if step == budget or (diverged and acc is None):
                acc, train_acc = curve[-1][1], accuracy(model, x, y)
            reached = reached or (target is not None and bool(curve) and curve[-1][1] >= target)
            if diverged or step >= last or (step >= budget and (reached or target is None)):
                break
        else:
            continue
        break
    hit = steps_to_target(curve, target) if target is not None else None
    return {"global_batch": batch, "policy": policy, "k": batch / base_batch, "peak_lr": peak,
            "world_size": world_size, "width": width, "seed": seed, "base_lr": base_lr,
            "warmup_epochs": warmup_epochs, "evals_per_epoch": evals_per_epoch,
            "warmup_steps": warm, "steps_per_epoch": steps_per_epoch, "steps": budget,
            "test_acc": acc, "train_acc": train_acc, "diverged": diverged, "final_loss": losses[-1],
            "target": target, "steps_to_target": hit,
            "epochs_to_target": None if hit is None else hit / steps_per_epoch,
            "steps_run": step, "loss_curve": losses, "lr_curve": lrs, "acc_curve": curve,
            "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------- the sweep
def load_study_data(train_subset: int, test_subset: int, seed: int = 0, device=None, quiet=False):
    """`((x, y, x_test, y_test), label)`: `load_cifar10` subsets as tensors on `device`; `label`
    names the data (`data_label`: CIFAR-10, Fashion-MNIST or SYNTHETIC)."""
    from dltutor.data.cifar10 import data_label, load_cifar10
    from dltutor.data.loaders import to_device_tensors
    train, test, info = load_cifar10(train_subset=train_subset, test_subset=test_subset, seed=seed,
                                     quiet=quiet)
    return (*to_device_tensors(train, device), *to_device_tensors(test, device)), data_label(info)


def sweep(data, batches, policies=tuple(POLICIES), *, base_lr: float, epochs: int,
          target: float | None = None, target_fraction: float = 0.95,
          target_policies=("scaled+warmup",), max_epochs: int | None = None, echo=print,
          **run_kw) -> list[dict]:
    """One row per (global batch, policy); the smallest batch is the base (k = 1) and runs once,
    as every policy is the same there.

    target: the test accuracy the steps are counted to; None = `target_fraction` x the base run's
    test accuracy at the end of the budget. Runs of `target_policies` go on up to `max_epochs`
    (default 3 x `epochs`) until they reach it. `echo(text)` gets one line per run (None: quiet).
    """
    batches = sorted(set(batches))
    base_batch, max_epochs = batches[0], max_epochs or 3 * epochs
    common = dict(base_lr=base_lr, base_batch=base_batch, epochs=epochs, **run_kw)
    base = train_run(data, base_batch, "fixed", max_epochs=max_epochs, target=target, **common)
    if target is None:
        target = round(target_fraction * base["test_acc"], 3)
        base.update(target=target, steps_to_target=steps_to_target(base["acc_curve"], target))
        base["epochs_to_target"] = base["steps_to_target"] / base["steps_per_epoch"]
    rows = [{**base, "policy": p} for p in policies]
    for batch in batches[1:]:
        for policy in policies:
            extra = dict(target=target, max_epochs=max_epochs) if policy in target_policies else {}
            rows.append(train_run(data, batch, policy, **common, **extra))
            if echo:
                r = rows[-1]
                echo(f"B={batch:5d} {policy:14s} lr {r['peak_lr']:.3g} warm-up {r['warmup_steps']:3d} "
                     f"steps: test acc {r['test_acc']:.3f} after {r['steps']} steps ({r['seconds']:.1f} s)")
    return rows


def lab_args(row: dict, train_subset: int, test_subset: int) -> list:
    """Lab 02's arguments that repeat `row`'s run (up to its budget of epochs) on
    `row["world_size"]` ranks: `--model cnn --strong`, the same LR policy, seed and test points."""
    scale, warm = POLICIES[row["policy"]]
    base_batch = round(row["global_batch"] / row["k"])
    every = max(1, row["steps_per_epoch"] // row["evals_per_epoch"])
    policy = (["--warmup-epochs", row["warmup_epochs"]] if warm else ["--warmup-steps", 0])
    return ["--model", "cnn", "--width", row["width"], "--strong", "--global-batch", row["global_batch"],
            "--base-batch", base_batch, "--lr", row["base_lr"], *policy, *([] if scale else ["--no-scale-lr"]),
            "--epochs", row["steps"] // row["steps_per_epoch"], "--train-subset", train_subset,
            "--test-subset", test_subset, "--eval-every", every, "--seed", row["seed"],
            "--log-every", 10 ** 6, *([] if row["target"] is None else ["--target-acc", row["target"]])]
