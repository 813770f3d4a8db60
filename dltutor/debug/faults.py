"""Inside a rank of lab 08: the faults it can inject, each on one rank at one step (or on all).

`Fault(name, fault_rank, fault_step, rank)` answers "is this step broken here?" and does the
breaking; each fault reports `event="fault"` with the wall time `t` when it strikes, so the kernel
can time how long the first message that names it takes. `caught` is what a rank does with the
error a broken collective raises: report it (with the time), dump the Flight Recorder, go.
"""
from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as tdist  # DDP:

from dltutor.core import dist

FAULTS = ("none", "skip", "order", "shape", "dtype", "set_epoch", "random_op", "bn_buffer",
          "outside_ddp", "straggler", "nan", "kill")
HANGS = ("skip", "order")                      # the job hangs until the group's timeout
MISMATCH = ("shape", "dtype")                  # one collective with other shapes or dtypes
DIVERGE = ("random_op", "bn_buffer", "outside_ddp")
ALL_RANKS = ("set_epoch", "bn_buffer")         # a fault of the code every rank runs
CAUSES = {
    "skip": "a rank skipped a collective (a condition on the rank)",
    "order": "collectives called in a different order on the ranks",
    "shape": "one collective with another shape on one rank",
    "dtype": "one collective with another dtype on one rank",
    "set_epoch": "sampler.set_epoch never called: the same order every epoch",
    "random_op": "a random op (a layer re-initialised) run on one rank only",
    "bn_buffer": "BatchNorm buffers not synchronised (DDP's forward_sync_buffers=False)",
    "outside_ddp": "an update applied to one rank's weights outside DDP",
    "straggler": "one rank slower every step (a busy core)",
    "nan": "an inf in one rank's batch (a corrupt sample)",
    "kill": "a rank killed (SIGKILL, what the OOM killer sends)",
}


class Fault:
    def __init__(self, name: str, fault_rank: int, fault_step: int, rank: int,
                 slow_ms: float = 150.0):
        if name not in FAULTS:
            raise ValueError(f"unknown fault {name!r}; one of {FAULTS}")
        self.name, self.fault_rank, self.fault_step = name, fault_rank, fault_step
        self.rank, self.slow_s, self.reported = rank, slow_ms / 1000.0, False

    def on(self, name: str) -> bool:
        """This fault is `name` and strikes this rank (at some step)."""
        return self.name == name and (name in ALL_RANKS or self.rank == self.fault_rank)

    def now(self, name: str, step: int) -> bool:
        """This fault is `name` and strikes this rank at this step."""
        return self.on(name) and step == self.fault_step

    def strike(self, step: int, **extra) -> None:
        """Report the moment the fault happens (once)."""
        if not self.reported:
            self.reported = True
            dist.report(event="fault", fault=self.name, step=step, t=time.time(), **extra)

    # ---- the faults, in the order the training step meets them
    def corrupt(self, x: torch.Tensor, step: int) -> torch.Tensor:
        if self.now("nan", step):
            self.strike(step)
            x = x.clone()
            x[0, 0] = float("inf")           # one corrupt sample
        return x

    def delay(self, step: int) -> None:
        if self.on("straggler") and step >= self.fault_step:
            self.strike(step, slow_ms=self.slow_s * 1000)
            time.sleep(self.slow_s)          # stands for a busy core or a slow node

    def after_update(self, model: torch.nn.Module, step: int) -> None:
        if self.now("random_op", step):
            self.strike(step)
            model[-1].reset_parameters()     # a random op the other ranks never run
        elif self.on("outside_ddp") and step >= self.fault_step:
            self.strike(step)
            with torch.no_grad():            # weight decay by hand, on the module, not through DDP
                for p in model.parameters():
                    p.mul_(0.99)
        elif self.on("bn_buffer") and step == 0:
            self.strike(step)
        elif self.on("set_epoch") and step == 0:
            self.strike(step)

    def log_loss(self, loss: torch.Tensor, step: int, ctx, watch) -> float | None:
        """The logged loss: an all-reduce (mean over ranks), then rank 0's stop flag broadcast."""
        if not ctx.is_distributed:
            return float(loss)
        value = loss.reshape(1).clone()
        flag = torch.zeros(1, device=value.device)          # NCCL: on this rank's GPU
        if self.now("skip", step):
            self.strike(step)
            return None                      # `if rank != ...:` around the logging
        if self.now("shape", step):
            self.strike(step)
            value = torch.cat([value, value])          # e.g. per-class sums of a partial batch
        if self.now("dtype", step):
            self.strike(step)
            value = value.double()
        if self.now("order", step):
            self.strike(step)
            tdist.broadcast(flag, src=0)  # DDP: the other ranks all-reduce first
            tdist.all_reduce(value)  # DDP:
        else:
            watch.agree(value, "loss")
            tdist.all_reduce(value)  # DDP: the mean loss for the log
            tdist.broadcast(flag, src=0)  # DDP: rank 0 says whether to stop early
        return float(value[0]) / ctx.world_size

    def kill(self, step: int) -> None:
        if self.now("kill", step):
            self.strike(step)
            os.kill(os.getpid(), signal.SIGKILL)


def detail_debug() -> bool:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL is on. DistributedDataParallel's constructor crashes
    (SIGSEGV) under it on gloo in torch 2.14.1, so lab 08 then averages gradients by hand."""
    return os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL"


def average_gradients(model: torch.nn.Module, world_size: int) -> None:
    """DDP's job, by hand: every gradient summed over the ranks, divided by their number."""
    for p in model.parameters():
        if p.grad is not None:
            tdist.all_reduce(p.grad)  # DDP:
            p.grad /= world_size


def caught(exc: BaseException, ctx, fr_dir=None) -> None:
    """Report an error a collective raised (the first line that names it, and when), then dump
    torch's Flight Recorder when it records (gloo dumps nothing by itself on a timeout)."""
    from dltutor.debug import flight
    dist.report(event="caught", t=time.time(), error=str(exc)[:1500])
    if fr_dir and flight.recording():
        path = flight.dump(fr_dir, ctx.rank)
        dist.report(event="fr_dump", path=str(path))


def buffer_sync(sync: bool) -> dict:
    """DDP's keyword for syncing buffers (BatchNorm's running stats) in every forward.

    torch 2.14 names it `forward_sync_buffers` and deprecates `broadcast_buffers`; older torch
    (a GPU site's own, e.g. 2.11) knows only `broadcast_buffers`. Either way False lets the
    ranks' buffers drift apart, which is the `bn_buffer` fault."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel
    known = inspect.signature(DistributedDataParallel.__init__).parameters
    return {"forward_sync_buffers" if "forward_sync_buffers" in known else "broadcast_buffers": sync}
