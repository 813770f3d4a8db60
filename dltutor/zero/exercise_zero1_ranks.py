"""Notebook 04's ZeRO-1 exercise, inside the launched ranks (and what the kernel's judge shares).

The student writes `shard_bounds(numel, rank, world_size)` and a class `Zero1(params, rank,
world_size)` whose `step()` runs after backward: average the flat gradient over the ranks, step
Adam on this rank's shard of the flat parameters only, all-gather the shards back into every
rank's parameters. The script ends with `run(Zero1)` (imported from `exercise_zero1`).

Inside each rank `run` trains two small float64 MLPs one after the other, from seeds the check
draws (`DLTUTOR_ZERO1_SEED` and the next one); the hidden width follows the seed, so the two
models have different parameter counts, all odd (57, 75 or 93: 2 ranks never split them evenly,
and no bound can be typed in). Each rank gets its half of every global batch, and after each of
the STEPS steps reports its flat parameters and the Adam state it holds: every
torch.optim.Optimizer alive in the rank that this model's run created (found through the garbage
collector, so state kept anywhere counts), its bytes and, after the last step, its exp_avg values.

`exercise_zero1.check` launches the script; `exercise_zero1_judge` judges what it reported.
"""
from __future__ import annotations

import gc
import os
import traceback
import weakref

import torch
from torch import nn

from dltutor.core import dist as _dist

NPROC, STEPS, PER_RANK_BATCH = 2, 3, 4
IN, OUT = 5, 3
HIDDENS = (6, 8, 10)               # 9h + 3 parameters: 57, 75, 93 (odd: an uneven split), the
                                   # cut at ceil(numel/2) inside 0.weight
ADAM = dict(lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)   # the decay makes a sum
TOLERANCE = 1e-6                   # of gradients differ from their mean (Adam alone would not)
SEED_ENV = "DLTUTOR_ZERO1_SEED"


# ------------------------------------------------------------------ the same in ranks and kernel
def run_seeds(seed: int) -> tuple[int, int]:
    """The two models of one check: consecutive seeds, so two different widths."""
    return seed, seed + 1


def hidden(seed: int) -> int:
    return HIDDENS[seed % len(HIDDENS)]


def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    width = hidden(seed)
    return nn.Sequential(nn.Linear(IN, width), nn.Tanh(), nn.Linear(width, OUT)).double()


def global_batch(seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1000 + step)
    n = NPROC * PER_RANK_BATCH
    return (torch.randn(n, IN, generator=g, dtype=torch.float64),
            torch.randn(n, OUT, generator=g, dtype=torch.float64))


def rank_batch(seed: int, step: int, rank: int):
    x, y = global_batch(seed, step)
    part = slice(rank * PER_RANK_BATCH, (rank + 1) * PER_RANK_BATCH)
    return x[part], y[part]


def adam(params) -> torch.optim.Adam:
    """Adam with the exercise's settings (the check's one-process run uses the same)."""
    return torch.optim.Adam(params, **ADAM)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def state_tensors(optimizers):
    """(key, tensor) of every state tensor these optimizers hold, but the one-number step
    counters (one per parameter tensor: 4 in one process, 1 on a flat shard)."""
    for opt in optimizers:
        for st in opt.state.values():
            for key, t in st.items():
                if torch.is_tensor(t) and t.dim() > 0:
                    yield key, t


def state_bytes(optimizers) -> tuple[int, int]:
    """(bytes of every state tensor, elements of exp_avg) of these optimizers."""
    total = elems = 0
    for key, t in state_tensors(optimizers):
        total += t.numel() * t.element_size()
        elems += t.numel() if key == "exp_avg" else 0
    return total, elems


# ------------------------------------------------------------------ inside the launched ranks
def run(zero1_cls) -> None:
    """Train two models STEPS steps each with the student's `zero1_cls`, reporting each step."""
    seed = int(os.environ.get(SEED_ENV, "0"))
    with _dist.session() as ctx:
        for s in run_seeds(seed):
            train(zero1_cls, s, ctx.rank, ctx.world_size)


def _optimizers():
    return [o for o in gc.get_objects() if isinstance(o, torch.optim.Optimizer)]


def train(zero1_cls, seed: int, rank: int, world_size: int) -> None:
    """One model from `seed`: STEPS steps of the student's optimizer, a report after each."""
    gc.collect()
    earlier = weakref.WeakSet(_optimizers())       # an earlier model's state does not count
    model = build_model(seed)
    try:
        opt = zero1_cls(model.parameters(), rank, world_size)
    except Exception as exc:
        _error(seed, 0, exc)
        raise
    for step in range(1, STEPS + 1):
        x, y = rank_batch(seed, step, rank)
        model.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        try:
            opt.step()
        except Exception as exc:
            _error(seed, step, exc)
            raise
        mine = [o for o in _optimizers() if o not in earlier]
        held, elems = state_bytes(mine)
        extra = {}
        if step == STEPS:
            extra = dict(exp_avg=[t.reshape(-1).tolist() for k, t in state_tensors(mine)
                                  if k == "exp_avg"],
                         dtypes=sorted({str(t.dtype) for _, t in state_tensors(mine)}))
        _dist.report(event="zero1_step", step=step, seed=seed, params=flat(model),
                     state_bytes=held, state_elems=elems, **extra)
    del opt, mine


def _error(seed: int, step: int, exc: Exception) -> None:
    _dist.report(event="error", seed=seed, step=step, error="".join(
        traceback.format_exception_only(type(exc), exc)).strip())
