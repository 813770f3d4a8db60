"""Notebook 06's exercise `06-tensor-parallel`: a Megatron MLP written by hand on 2 gloo ranks.

The student writes `tp_mlp(x, w1, b1, w2, b2)` in a script that ends with `run(tp_mlp)`. Each
launched rank builds the MLP `y = gelu(x W1^T + b1) W2^T + b2` from the check's seed, in sizes
drawn from the seed (`dims`: d_model and hidden/2 always differ, so a weight used untransposed
fails) and hands the student's function ONLY its slices: rows r*H/p .. (r+1)*H/p of W1 and b1
(column-parallel), the matching columns of W2 (row-parallel) and b2 whole. With a part of the
weights, no rank can compute the output alone: the ranks must communicate. The rank runs the
forward and `(y * G).sum().backward()` (G a fixed upstream gradient) and reports the output, the
input's gradient, its slices' gradients and every collective call (`dltutor.grading.calls`: only
all_reduce is allowed; each call is recorded with its shape and whether it ran in the forward or
the backward).

In the kernel, `judge` (`exercise_tp_judge`) compares each rank with the one-process MLP in
float64: output and input gradient within TOL, each slice's gradient equal to the matching slice
of the full gradient, and exactly one all-reduce of a (tokens x d_model) tensor in each
direction (Megatron's g forward, f backward), naming the known mistakes.
"""
from __future__ import annotations

import os
import random
import time
import traceback

from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks
from dltutor.grading.calls import CallLog, watched
from dltutor.model_parallel.exercise_tp_judge import judge_against, part

EXERCISE = "06-tensor-parallel"
NPROC = 2
SEED_ENV = "DLTUTOR_EXERCISE_SEED"
SOLUTION = "06_model_parallel/solutions/tp_mlp.py"
NOTEBOOK = "06_model_parallelism.ipynb"
FUNCTION = "tp_mlp"
HANDOUT = "MY_TP"                # the notebook's variable naming the student's script
WHY = ("Megatron's f and g are one dist.all_reduce each (the row-parallel layer's partial outputs "
       "are summed; an all-gather or a broadcast moves more bytes or other values)")


# ------------------------------------------------------------------ the MLP, in both places
def dims(seed: int, world: int = NPROC) -> tuple[int, int, int]:
    """(tokens, d_model, hidden) of the check with `seed`: hidden / world (odd) is never d_model,
    and tokens is neither, so a transposed weight or input cannot go unnoticed; none is the
    notebook's example (6 tokens, d_model 8, hidden 16), so sizes typed in from it fail."""
    rng = random.Random(seed)
    d_model = rng.choice((4, 6, 10))
    per_rank = rng.choice((3, 5, 7, 9))
    hidden = per_rank * world
    tokens = rng.choice([t for t in range(3, 10) if t not in (6, d_model, per_rank, hidden)])
    return tokens, d_model, hidden


def build(seed: int, world: int = NPROC) -> dict:
    """The whole MLP, its input x and the upstream gradient G, in float64, from `seed`."""
    import torch
    tokens, d_model, hidden = dims(seed, world)
    g = torch.Generator().manual_seed(seed)

    def r(*shape, s=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * s
    return {"w1": r(hidden, d_model, s=d_model ** -0.5), "b1": r(hidden, s=0.5),
            "w2": r(d_model, hidden, s=hidden ** -0.5), "b2": r(d_model),
            "x": r(tokens, d_model), "G": r(tokens, d_model)}


def shard(full: dict, rank: int, world: int) -> dict:
    """Rank `rank`'s slices: W1's and b1's rows (column-parallel), W2's columns, b2 whole."""
    s = part(full["w1"].shape[0], rank, world)
    return {"w1": full["w1"][s], "b1": full["b1"][s], "w2": full["w2"][:, s], "b2": full["b2"]}


def forward(x, w1, b1, w2, b2):
    import torch.nn.functional as F
    y = F.gelu(x @ w1.T + b1) @ w2.T
    return y if b2 is None else y + b2


# ------------------------------------------------------------------ inside the launched ranks
def error_record(exc: BaseException, fn, **extra) -> dict:
    """What a rank reports when the student's code raised: the error, the student's line, when."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    mine = [f for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == fn.__code__.co_filename]
    if mine:
        text += f" (at your line {mine[-1].lineno}: {mine[-1].line})"
    return {"event": "error", "error": text, "t": time.time(), **extra}


def attempt(tp_mlp, rank: int, world: int, seed: int) -> tuple[dict, BaseException | None]:
    """Give `tp_mlp` this rank's slices, run forward and backward: (the record to report, the
    exception the student's code raised or None). The process group must be up."""
    full = build(seed, world)
    tokens, d_model = full["x"].shape
    mine = {k: v.clone().requires_grad_() for k, v in shard(full, rank, world).items()}
    x, upstream = full["x"].clone().requires_grad_(), full["G"]
    del full                              # the rank keeps only its slices
    log = CallLog()
    try:
        with watched(log, record=("all_reduce",), namespaces=[tp_mlp.__globals__], why=WHY):
            log.phase = "forward"
            y = tp_mlp(x, mine["w1"], mine["b1"], mine["w2"], mine["b2"])
            if not hasattr(y, "shape") or tuple(y.shape) != (tokens, d_model):
                raise TypeError(f"tp_mlp must return the ({tokens}, {d_model}) output "
                                f"tensor, not {getattr(y, 'shape', type(y).__name__)}")
            log.phase = "backward"
            (y * upstream).sum().backward()
    except Exception as exc:  # noqa: BLE001 - the student's code: report it, the caller raises
        return error_record(exc, tp_mlp, phase=log.phase, calls=log.calls), exc
    grads = {k: None if t.grad is None else t.grad.tolist() for k, t in mine.items()}
    return {"event": "tp_mlp", "out": y.detach().tolist(),
            "x_grad": None if x.grad is None else x.grad.tolist(), "grads": grads,
            "calls": log.calls}, None


def run(tp_mlp) -> None:
    """The last line of the student's script: run `tp_mlp` on this rank, report what came out."""
    with _dist.session() as ctx:
        record, exc = attempt(tp_mlp, ctx.rank, ctx.world_size,
                              int(os.environ.get(SEED_ENV, "0")))
        _dist.report(**record)
        if exc is not None:
            raise exc


# ------------------------------------------------------------------ in the kernel
def reference(seed: int, world: int = NPROC) -> dict:
    """The one-process output and gradients, and what each rank alone would give (partials)."""
    import torch
    full = build(seed, world)
    leaves = {k: full[k].clone().requires_grad_() for k in ("x", "w1", "b1", "w2", "b2")}
    y = forward(*(leaves[k] for k in ("x", "w1", "b1", "w2", "b2")))
    (y * full["G"]).sum().backward()
    partial, partial_x_grad = [], []
    for r in range(world):
        x = full["x"].clone().requires_grad_()
        s = shard(full, r, world)
        y_r = forward(x, s["w1"], s["b1"], s["w2"], None)
        (y_r * full["G"]).sum().backward()
        partial.append(y_r.detach())
        partial_x_grad.append(x.grad)
    return {"out": y.detach(), "x_grad": leaves["x"].grad, "b2": full["b2"],
            "grads": {k: leaves[k].grad for k in ("w1", "b1", "w2", "b2")},
            "partial": partial, "partial_x_grad": partial_x_grad, "dims": dims(seed, world)}


def judge(metrics: list[dict], seed: int, world: int = NPROC) -> tuple[list[str], str]:
    """(problems, summary): the ranks' reports against the one-process MLP of `seed`
    (`exercise_tp_judge`)."""
    return judge_against(metrics, reference(seed, world), world)


def work_file():
    """Where the notebook writes the student's script (`%%writefile {MY_TP}`)."""
    return ranks.work_file("tp_mlp.py")


def handout(variable: str = "MY_TP") -> str | None:
    """The script as handed out: notebook 06's `%%writefile {variable}` cell (None if absent)."""
    return ranks.handout(NOTEBOOK, variable)


def echoed(script, handed: str | None, echo: bool) -> bool:
    """Whether to echo the ranks' output: not for the script as handed out, whose TODOs raise
    on every rank and whose verdict is "not yet" (the tracebacks stay in the rank logs)."""
    return echo and not (handed is not None and ranks.untouched(script, handed))


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 120.0,
          seed: int | None = None) -> bool:
    """Launch `script` on 2 gloo ranks with a fresh seed and show the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    handed = handout(HANDOUT)
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC, todo='f, g and tp_mlp',
                              seed_env=SEED_ENV, reference=solution, timeout=timeout, seed=seed,
                              echo=echoed(script, handed, echo), handout=handed)
