"""Notebook 04's exercise: ZeRO-1 by hand, on 2 gloo ranks.

The student writes `shard_bounds(numel, rank, world_size)` and a class `Zero1(params, rank,
world_size)` whose `step()` runs after backward: average the flat gradient over the ranks, step
Adam on this rank's shard of the flat parameters only, all-gather the shards back into every
rank's parameters. The script ends with `run(Zero1)`. Inside each rank `run` builds the same
small float64 MLP and data from the check's seed (`DLTUTOR_ZERO1_SEED`, drawn per check), feeds
each rank its half of every global batch, and after each of the STEPS steps reports the rank's
flat parameters and the bytes of Adam state it holds (every torch.optim.Optimizer alive in the
rank, found through the garbage collector, so state kept anywhere counts).

In the kernel `check(script)` launches the script and compares every rank after every step with
one process running torch.optim.Adam on the whole global batch, and each rank's Adam state with
that process's. Mistakes it names: parameters never updated, shards not all-gathered, gradients
not all-reduced or summed instead of averaged, shards with a gap or an overlap, full Adam state.
"""
from __future__ import annotations

import gc
import os
import traceback

import torch
from torch import nn

from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks

EXERCISE = "04-zero1"
NPROC, STEPS, PER_RANK_BATCH = 2, 3, 4
IN, HIDDEN, OUT = 5, 6, 3          # 57 parameters: an uneven split, a shard cut inside 0.weight
ADAM = dict(lr=0.05, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)   # the decay makes a sum
TOLERANCE = 1e-6                   # of gradients differ from their mean (Adam alone would not)
STATE_SHARE = (0.45, 0.55)         # a rank's Adam bytes / one process's (step counters aside)
SEED_ENV = "DLTUTOR_ZERO1_SEED"


# ------------------------------------------------------------------ the same in ranks and kernel
def build_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUT)).double()


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


def state_bytes(optimizers) -> tuple[int, int]:
    """(bytes, elements) of the state these optimizers hold: bytes of every state tensor but the
    one-number step counters (one per parameter tensor: 4 in one process, 1 on a flat shard),
    elements of exp_avg."""
    total = elems = 0
    for opt in optimizers:
        for st in opt.state.values():
            for key, t in st.items():
                if torch.is_tensor(t) and t.dim() > 0:
                    total += t.numel() * t.element_size()
                    elems += t.numel() if key == "exp_avg" else 0
    return total, elems


# ------------------------------------------------------------------ inside the launched ranks
def run(zero1_cls) -> None:
    """Train STEPS steps with the student's `zero1_cls`, reporting after each step."""
    seed = int(os.environ.get(SEED_ENV, "0"))
    with _dist.session() as ctx:
        model = build_model(seed)
        try:
            opt = zero1_cls(model.parameters(), ctx.rank, ctx.world_size)
        except Exception as exc:
            _error(0, exc)
            raise
        for step in range(1, STEPS + 1):
            x, y = rank_batch(seed, step, ctx.rank)
            model.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            try:
                opt.step()
            except Exception as exc:
                _error(step, exc)
                raise
            held, elems = state_bytes(o for o in gc.get_objects()
                                      if isinstance(o, torch.optim.Optimizer))
            _dist.report(event="zero1_step", step=step, seed=seed, params=flat(model),
                         state_bytes=held, state_elems=elems)


def _error(step: int, exc: Exception) -> None:
    _dist.report(event="error", step=step, error="".join(
        traceback.format_exception_only(type(exc), exc)).strip())


# ------------------------------------------------------------------ in the kernel
def bounds(numel: int, rank: int, world_size: int) -> tuple[int, int]:
    """The shards the check expects (torch.chunk's: ceil sizes, the last rank takes the rest)."""
    size = -(-numel // world_size)
    return min(rank * size, numel), min((rank + 1) * size, numel)


def where(model: nn.Module, lo: int, hi: int) -> str:
    """Flat elements [lo, hi) as parameter names, e.g. '0.weight[28:30], 0.bias'."""
    out, at = [], 0
    for name, p in model.named_parameters():
        a, b = max(lo, at), min(hi, at + p.numel())
        if a < b:
            out.append(name if (a, b) == (at, at + p.numel()) else f"{name}[{a - at}:{b - at}]")
        at += p.numel()
    return ", ".join(out)


def reference(seed: int):
    """One process, torch.optim.Adam on the global batch: flat parameters after each step, and
    the bytes of its Adam state."""
    model = build_model(seed)
    opt = adam(model.parameters())
    after = []
    for step in range(1, STEPS + 1):
        x, y = global_batch(seed, step)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        after.append(flat(model))
    return after, state_bytes([opt])[0]


def mistaken(seed: int, combine: str) -> list[torch.Tensor]:
    """The ranks' common trajectory when the gradients are `combine`d wrongly: 'local' (no
    all-reduce: each shard stepped with its own rank's gradient) or 'sum' (not divided)."""
    model = build_model(seed)
    w = flat(model).clone()
    opt, after = adam([w]), []
    for step in range(1, STEPS + 1):
        grads = []
        for r in range(NPROC):
            torch.nn.utils.vector_to_parameters(w, model.parameters())
            model.zero_grad()
            nn.functional.mse_loss(model(rank_batch(seed, step, r)[0]),
                                   rank_batch(seed, step, r)[1]).backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        if combine == "sum":
            w.grad = sum(grads)
        else:
            w.grad = torch.cat([g[slice(*bounds(w.numel(), r, NPROC))]
                                for r, g in enumerate(grads)])
        opt.step()
        after.append(w.detach().clone())
    return after


def _runs(mask: torch.Tensor) -> list[tuple[int, int]]:
    idx, out = mask.nonzero().flatten().tolist(), []
    for i in idx:
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def _param_problems(reports: list[list[dict]], seed: int) -> list[str]:
    model, (ref, _) = build_model(seed), reference(seed)
    init, n = flat(model), ref[0].numel()
    for s in range(STEPS):
        got = [torch.tensor(rep[s]["params"], dtype=torch.float64) for rep in reports]
        if any(g.numel() != n for g in got):
            return [f"after step {s + 1} rank(s) report {[g.numel() for g in got]} parameters, "
                    f"the model has {n}"]
        diffs = [(g - ref[s]).abs() for g in got]
        if max(d.max().item() for d in diffs) <= TOLERANCE:
            continue
        before = [init] * NPROC if s == 0 else [
            torch.tensor(rep[s - 1]["params"], dtype=torch.float64) for rep in reports]
        moved = [(g != b) for g, b in zip(got, before)]
        head = f"after step {s + 1} of {STEPS}:"
        if not any(m.any() for m in moved):
            return [head, "no rank's parameters changed: no update reached the model (step "
                    "Adam on the shard, then copy the gathered shards into the parameters)"]
        if any(not m.all() for m in moved) and any((m != moved[0]).any() for m in moved):
            return [head] + [f"rank {r} updated only {where(model, *_runs(m)[0])} (flat "
                             f"{_runs(m)[0][0]}:{_runs(m)[0][1]}, its shard); "
                             f"{', '.join(where(model, *g) for g in _runs(~m))} kept the old "
                             "values: all-gather the "
                             "shards into every rank's parameters after the step"
                             for r, m in enumerate(moved) if len(_runs(m)) == 1 and not m.all()]
        if not moved[0].all() and all((m == moved[0]).all() for m in moved):
            gap = _runs(~moved[0])
            return [head, "no rank updated " + ", ".join(
                f"{where(model, a, b)} (flat {a}:{b})" for a, b in gap) +
                f": the shards must cover all {n} elements (an uneven split: the last rank "
                "takes what is left)"]
        for combine, hint in (("local", "the gradients were not all-reduced: each rank stepped "
                               "its shard with the gradient of its own half-batch (all_reduce "
                               "the flat gradient, then divide by world_size)"),
                              ("sum", f"the gradients were summed, not averaged: divide the "
                               f"all-reduced gradient by world_size ({NPROC})")):
            if all((g - mistaken(seed, combine)[s]).abs().max() <= TOLERANCE for g in got):
                return [head, hint]
        lines = [head]
        for r, d in enumerate(diffs):
            k = int(d.argmax())
            lines.append(f"rank {r}: {int((d > TOLERANCE).sum())} of {n} elements differ; the "
                         f"most at {where(model, k, k + 1)} (flat element {k}): "
                         f"{got[r][k].item():.6g}, one-process Adam gives {ref[s][k].item():.6g}, "
                         f"|difference| {d.max().item():.2e}" if d.max() > TOLERANCE else
                         f"rank {r}: matches one-process Adam")
        return lines
    return []


def _state_problems(reports: list[list[dict]], seed: int) -> tuple[list[str], list[float]]:
    ref_params, full = reference(seed)
    n = ref_params[0].numel()
    shares = [rep[-1]["state_bytes"] / full for rep in reports]
    lo, hi = STATE_SHARE
    out = []
    for r, share in enumerate(shares):
        if not lo <= share <= hi:
            what = ("keep only your shard" if share > hi else
                    "keep Adam's state for your shard in a torch.optim.Adam (e.g. adam([shard]))")
            out.append(f"rank {r} holds {100 * share:.0f} % of the Adam state of one process "
                       f"({reports[r][-1]['state_bytes']} of {full} bytes of exp_avg and "
                       f"exp_avg_sq): {what}")
    elems = [rep[-1]["state_elems"] for rep in reports]
    if not out and sum(elems) != n:
        how = "overlap" if sum(elems) > n else "leave a gap"
        out.append(f"the ranks together keep Adam state for {sum(elems)} elements ({elems} per "
                   f"rank), the model has {n}: the shards {how} (check shard_bounds with an "
                   "uneven split)")
    return out, shares


def judge(metrics: list[dict], seed: int) -> tuple[list[str], str]:
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return [f"rank {e['rank']} failed in step {e['step']}: {e['error']}" for e in errors], ""
    reports = [[m for m in metrics if m.get("event") == "zero1_step" and m.get("rank") == r]
               for r in range(NPROC)]
    if any([m["step"] for m in rep] != list(range(1, STEPS + 1)) or
           any(m.get("seed") != seed for m in rep) for rep in reports):
        return [f"not every rank reported steps 1..{STEPS} of this check's run (seed {seed}): "
                "end the script with run(Zero1) and report nothing else"], ""
    problems = _param_problems(reports, seed)
    state, shares = _state_problems(reports, seed)
    summary = (f"on {NPROC} ranks every parameter matches one process's torch.optim.Adam after "
               f"each of {STEPS} steps (within {TOLERANCE:g}); each rank holds "
               f"{' and '.join(f'{100 * s:.0f} %' for s in shares)} of its Adam state")
    return state + problems, summary


def work_file():
    """Where the notebook writes the student's script (`%%writefile {path}`)."""
    return ranks.work_file("zero1_by_hand.py")


def check(script=None, solution: bool = False, echo: bool = False, seed: int | None = None,
          timeout: float = 120.0) -> bool:
    """Launch the ZeRO-1 script on 2 gloo ranks, print the verdict, return whether it passed."""
    if solution:
        script = course.lab("04_deepspeed/solutions/zero1_by_hand.py")
    script = work_file() if script is None else script
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC,
                              todo="shard_bounds and Zero1", seed_env=SEED_ENV,
                              reference=solution, echo=echo, timeout=timeout, seed=seed)
