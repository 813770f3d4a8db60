"""Inside a launched rank: what the student's DDP or Horovod exercise script is given.

Notebooks 02 and 03 ask the student to turn a single-process loop into a data-parallel one. The
loop itself (model, data, optimizer, the checkpoint call) comes from here, so the only lines the
student writes are the distributed ones; `dltutor.ddp.exercise_check` (in the kernel) launches
the script on 2 gloo ranks and judges what these helpers recorded:

  dataset()          a tiny labelled set (real numbers, made up: a self-check, not a lesson in
                     accuracy) that remembers which samples this rank read, and whether a process
                     group (torch.distributed or Horovod) was open while it did; its size is the
                     check's (drawn per check, SAMPLES_ENV: never a multiple of the ranks), or
                     SAMPLES when the script runs by hand
  model()            a small MLP with *random* weights, different on every rank (as without a
                     common seed), so that a missing broadcast shows
  optimizer(params)  SGD with momentum, the same on every rank and in the reference
  save_checkpoint()  writes the checkpoint atomically and reports which rank wrote it
  report(model)      the end: reports the final and initial weights and what this rank read

Everything stays on the CPU: the check compares with a single-process run to float precision.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from dltutor.core import dist

SAMPLES, FEATURES, HIDDEN, CLASSES = 64, 8, 16, 3      # SAMPLES: the size when run by hand
SAMPLES_ENV = "DLTUTOR_EXERCISE_SAMPLES"     # the size a check drew (dltutor.ddp.exercise_check)
EPOCHS, PER_RANK_BATCH, LR, MOMENTUM = 2, 8, 0.1, 0.9
DATA_SEED = 0                 # the data set; DistributedSampler keeps its default seed 0
CHECKPOINT_ENV = "DLTUTOR_EXERCISE_CHECKPOINT"

_RECORD: dict = {"init": None, "data": None}


def group_open() -> bool:
    """Is this process in a torch.distributed group or a Horovod job right now?"""
    import torch.distributed as tdist
    hvd = sys.modules.get("horovod.torch")
    return bool((tdist.is_available() and tdist.is_initialized())
                or (hvd is not None and hvd.is_initialized()))


def samples() -> int:
    """The data set's size: the one the check drew for this run, else SAMPLES."""
    raw = os.environ.get(SAMPLES_ENV, "").strip()
    return int(raw) if raw else SAMPLES


def make_tensors(n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The data set's `n` inputs and labels (default: samples()): three Gaussian clouds, the
    same in every process."""
    n = samples() if n is None else n
    g = torch.Generator().manual_seed(DATA_SEED)
    y = torch.randint(0, CLASSES, (n,), generator=g)
    centres = torch.randn(CLASSES, FEATURES, generator=g)
    return centres[y] + 0.5 * torch.randn(n, FEATURES, generator=g), y


class TrackedData(Dataset):
    """The exercise's data; `seen` lists every index read, in order."""

    def __init__(self):
        self.x, self.y = make_tensors()
        self.size = len(self.y)
        self.seen: list[int] = []
        self.in_group = False

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        self.seen.append(int(i))
        self.in_group = self.in_group or group_open()
        return self.x[i], self.y[i]


def dataset() -> TrackedData:
    _RECORD["data"] = TrackedData()
    return _RECORD["data"]


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, CLASSES))


def flat(model: nn.Module) -> torch.Tensor:
    """All parameters of `model` (unwrapped from DDP) as one float64 vector."""
    model = getattr(model, "module", model)
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def model() -> nn.Module:
    """The MLP, with weights drawn from a fresh random seed in every process."""
    torch.seed()
    net = build_model()
    _RECORD["init"] = flat(net)
    return net


def optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def checkpoint_path() -> Path:
    """Where the checkpoint goes: set by the self-check, else beside the working directory."""
    return Path(os.environ.get(CHECKPOINT_ENV) or "exercise_checkpoint.pt")


def save_checkpoint(state_dict: dict) -> Path:
    """Write `state_dict` (atomically: two ranks writing never leave a torn file) and report
    which rank wrote it."""
    path = checkpoint_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    torch.save({k: v.detach().cpu() for k, v in state_dict.items()}, tmp)
    os.replace(tmp, path)
    dist.report(event="checkpoint", path=str(path))
    return path


def report(model: nn.Module) -> dict:
    """The end of the script: the weights (final and initial) and what this rank read."""
    data = _RECORD["data"]
    if data is None or _RECORD["init"] is None:
        raise RuntimeError("build the data and the model with ex.dataset() and ex.model()")
    return dist.report(event="final", params=flat(model), init=_RECORD["init"], seen=data.seen,
                       in_group=data.in_group, group_open_at_end=group_open())
