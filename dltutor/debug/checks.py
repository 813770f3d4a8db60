"""Inside a rank of lab 08: the checks a student writes to find the faults that do not crash.

    watch = Checks(ctx, model, enabled=True)
    watch.agree(tensor, "loss")     # before a collective: all-gather (numel, ndim, dtype) of it
    before = watch.snapshot()       # after backward: parameters and the synchronised gradients
    watch.after_step(step, epoch, ids, before, lr, scale)   # -> fields for the step's report

`after_step` all-gathers one float64 checksum of the parameters and one of the buffers as the
forward saw them (after DDP's broadcast of rank 0's buffers; two numbers per rank: cheap), checks that this rank's parameters moved by exactly
-lr x the synchronised gradient (plain SGD), and fingerprints the batch's sample ids to compare
with the same step of the previous epoch (a forgotten sampler.set_epoch repeats them).
"""
from __future__ import annotations

import hashlib

import torch
import torch.distributed as tdist  # DDP:

DTYPES = {torch.float32: 1, torch.float64: 2, torch.float16: 3, torch.bfloat16: 4, torch.int64: 5}


def finite(tensors) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t is not None)


def checksum(tensors) -> float:
    """One number per tensor list: sum of (i+1) x value in float64, so a swap is seen too."""
    total = 0.0
    for t in tensors:
        flat = t.detach().reshape(-1).double()
        weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device)
        total += float((flat * weights).sum())
    return total


class MismatchFound(RuntimeError):
    """A fingerprint check found ranks about to call a collective with different tensors."""


class Checks:
    def __init__(self, ctx, model: torch.nn.Module, enabled: bool = True):
        self.ctx, self.model, self.enabled = ctx, model, enabled
        self.epoch_ids: dict[tuple[int, int], str] = {}
        self.steps_in_epoch: dict[int, int] = {}
        self.buffer_sum = 0.0
        if enabled:   # inside DDP's forward, after it broadcast rank 0's buffers (if it does)
            model.register_forward_pre_hook(self._seen_buffers)

    def _seen_buffers(self, module, inputs) -> None:
        self.buffer_sum = checksum(b for b in module.buffers() if b.is_floating_point())

    def _gather(self, values) -> list[list[float]]:
        mine = torch.tensor(values, dtype=torch.float64, device=self.ctx.device)   # NCCL: the GPU
        if not self.ctx.is_distributed:
            return [mine.tolist()]
        everyone = [torch.zeros_like(mine) for _ in range(self.ctx.world_size)]
        tdist.all_gather(everyone, mine)  # DDP: a few numbers per rank
        return [t.tolist() for t in everyone]

    def agree(self, tensor: torch.Tensor, name: str) -> None:
        """Raise MismatchFound, naming each rank's shape and dtype, if the ranks differ."""
        if not self.enabled:
            return
        mine = [tensor.numel(), tensor.dim(), DTYPES.get(tensor.dtype, 0)]
        everyone = self._gather(mine)
        if any(f != everyone[0] for f in everyone):
            names = {v: k for k, v in DTYPES.items()}
            desc = "; ".join(f"rank {r}: numel {int(f[0])}, dtype {names.get(int(f[2]), '?')}"
                             for r, f in enumerate(everyone))
            raise MismatchFound(f"fingerprint check before all_reduce({name}): ranks differ: "
                                f"{desc}")

    def snapshot(self):
        if not self.enabled:
            return None
        params = [p.detach().clone() for p in self.model.parameters()]
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                 for p in self.model.parameters()]
        return params, grads

    def after_step(self, step: int, epoch: int, ids, before, lr: float, scale) -> dict:
        if not self.enabled:
            return {}
        params = list(self.model.parameters())
        sums = self._gather([checksum(params), self.buffer_sum])
        out = {"param_sums": [s[0] for s in sums], "buffer_sums": [s[1] for s in sums]}
        if before is not None and scale is None:
            old, grads = before
            moved = max(float((p.detach() - (o - lr * g)).abs().max())
                        for p, o, g in zip(params, old, grads))
            out["update_error"] = moved          # 0 (rounding) when only the DDP update applied
        i = self.steps_in_epoch.get(epoch, 0)
        self.steps_in_epoch[epoch] = i + 1
        fp = hashlib.sha1(",".join(map(str, ids.tolist())).encode()).hexdigest()[:10]
        self.epoch_ids[(epoch, i)] = fp
        out["ids_fp"] = fp
        out["same_ids_as_last_epoch"] = epoch > 0 and self.epoch_ids.get((epoch - 1, i)) == fp
        return out
