"""Notebook 06's exercise `06-pipeline`: a GPipe forward over 2 stages, written by hand.

The student writes `gpipe_forward(stage, rank, data, m, loss_fn, width)` in a script that ends
with `run(gpipe_forward)`. Each launched rank builds the model from the check's seed, in sizes
drawn from the seed (`dims`: m micro-batches of a few rows, the widths), and keeps ONLY its own
stage: rank 0 the first half of the layers and the inputs, rank 1 the second half and the
targets. Rank 0 must cut the batch into m micro-batches, run its stage on each and send each
activation (width `width`) to rank 1; rank 1 receives them, runs its stage and returns the m
micro-batch losses, in order. Collectives are refused while the student's function runs.

What each rank did is recorded in program order (`dltutor.grading.calls` for every send, recv,
isend and irecv; `p2p_watch` for each run of the stage, with its rows and input, and for the
completion of each irecv), and each message is checked against its peer's before it moves (a
buffer of the wrong dtype or size, a receive no send matches: named on the spot).

In the kernel, `exercise_pp_judge.judge` decides from those records and the model on one
process: the losses; that the messages are the m micro-batches' stage-0 activations, in order;
and that the stages overlap: stage 0 runs once per micro-batch and sends each activation before
it starts the next micro-batch, and stage 1 starts micro-batch k once it has received it, before
it waits for micro-batch k+1. Stage 0 run on the whole batch before anything is sent, all the
micro-batches computed before the first send, or stage 1 receiving every micro-batch before its
first run is wrong, with the right losses.
"""
from __future__ import annotations

import os
import random

from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks
from dltutor.grading.calls import POINT_TO_POINT, CallLog, watched
from dltutor.grading.numbers import as_float, kind
from dltutor.model_parallel.exercise_pp_judge import judge_against
from dltutor.model_parallel.exercise_tp import SEED_ENV, error_record, echoed, handout
from dltutor.model_parallel.p2p_watch import p2p_watched, stage_runs

EXERCISE = "06-pipeline"
NPROC = 2
SOLUTION = "06_model_parallel/solutions/gpipe_forward.py"
FUNCTION = "gpipe_forward"
HANDOUT = "MY_PP"
WHY = "the stages talk point to point here: dist.send/recv (or isend/irecv)"
RECORDED = ("send", "recv", "isend", "irecv")


# ------------------------------------------------------------------ the model, in both places
def dims(seed: int) -> dict:
    """The check's sizes for `seed`: m micro-batches of `rows` rows (batch = m x rows), the input
    width, the activation's width, the output's. None is the notebook's example (m 4, 8 x 6
    inputs, width 8, 3 outputs), so sizes typed in from it fail; m is 5 or 6, where a typed-in
    data.chunk(4) cuts other micro-batches than data.chunk(m)."""
    rng = random.Random(seed)
    m, rows = rng.choice((5, 6)), rng.choice((2, 3))
    d_in = rng.choice((5, 7))
    width = rng.choice((6, 10))
    return {"m": m, "rows": rows, "batch": m * rows, "d_in": d_in, "width": width,
            "d_out": rng.choice((2, 4))}


def build(seed: int) -> dict:
    """The two stages' layers, the inputs and the targets, in float64, from `seed`."""
    import torch
    d = dims(seed)
    g = torch.Generator().manual_seed(seed)

    def r(*shape, s=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * s
    w = d["width"]
    return {"stage0": [(r(w, d["d_in"], s=d["d_in"] ** -0.5), r(w, s=0.3)),
                       (r(w, w, s=w ** -0.5), r(w, s=0.3))],
            "stage1": [(r(w, w, s=w ** -0.5), r(w, s=0.3)),
                       (r(d["d_out"], w, s=w ** -0.5), r(d["d_out"], s=0.3))],
            "x": r(d["batch"], d["d_in"]), "y": r(d["batch"], d["d_out"]), "dims": d}


def stage(layers, last: bool):
    """A stage as an nn.Sequential of Linear layers, each followed by Tanh except the model's
    last (the `last` stage's final layer goes to the loss)."""
    import torch
    mods = []
    for i, (w, b) in enumerate(layers):
        lin = torch.nn.Linear(w.shape[1], w.shape[0], dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        mods.append(lin)
        if not (last and i == len(layers) - 1):
            mods.append(torch.nn.Tanh())
    return torch.nn.Sequential(*mods)


def loss_fn(out, target):
    import torch.nn.functional as F
    return F.mse_loss(out, target)


# ------------------------------------------------------------------ inside the launched ranks
def _losses(out) -> tuple[list | None, str]:
    """The last stage's return as a list of floats (None where not a number), and its kind."""
    if hasattr(out, "detach") and hasattr(out, "reshape") and out.dim() > 0:
        items = list(out.detach().reshape(-1))
    elif isinstance(out, (list, tuple)):
        items = list(out)
    else:
        return None, kind(out)
    return [as_float(v.detach() if hasattr(v, "detach") else v) for v in items], kind(out)


def attempt(fn, rank: int, world: int, seed: int) -> tuple[dict, BaseException | None]:
    """Give `fn` this rank's stage and data, run it: (the record to report, the exception the
    student's code raised or None). The process group must be up; a receive that no send
    matches fails after $DLTUTOR_DIST_TIMEOUT seconds (30 unless set), as the group would."""
    timeout = float(os.environ.get(_dist.TIMEOUT_ENV, 30))
    full = build(seed)
    d = full["dims"]
    mine = stage(full[f"stage{rank}"], last=rank == world - 1)
    data = (full["x"] if rank == 0 else full["y"]).clone()
    del full                              # the rank keeps only its stage and its data
    log = CallLog(phase="forward")
    space = [fn.__globals__]
    try:
        with stage_runs(mine, log), p2p_watched(log, rank, 1 - rank, space, timeout), \
                watched(log, record=RECORDED, allow=("batch_isend_irecv",), namespaces=space,
                        why=WHY):
            out = fn(mine, rank, data, d["m"], loss_fn, d["width"])
    except Exception as exc:  # noqa: BLE001 - the student's code: report it, the caller raises
        return error_record(exc, fn, calls=_kept(log)), exc
    losses, returned = _losses(out) if rank == world - 1 else (None, "")
    return {"event": "gpipe", "losses": losses, "returned": returned, "calls": _kept(log)}, None


def _kept(log) -> list[dict]:
    return [c for c in log.calls if c["name"] in (*POINT_TO_POINT, "stage", "wait")]


def run(gpipe_forward) -> None:
    """The last line of the student's script: run `gpipe_forward` on this rank, report it."""
    with _dist.session() as ctx:
        record, exc = attempt(gpipe_forward, ctx.rank, ctx.world_size,
                              int(os.environ.get(SEED_ENV, "0")))
        _dist.report(**record)
        if exc is not None:
            raise exc


# ------------------------------------------------------------------ in the kernel
def reference(seed: int) -> dict:
    """Per micro-batch: the input's sum, the activation's sum, the loss; the whole batch's loss."""
    import torch
    full = build(seed)
    d = full["dims"]
    s0, s1 = stage(full["stage0"], False), stage(full["stage1"], True)
    with torch.no_grad():
        xs, ys = full["x"].chunk(d["m"]), full["y"].chunk(d["m"])
        acts = [s0(x) for x in xs]
        return {"dims": d, "input_sums": [float(x.sum()) for x in xs],
                "sums": [float(a.sum()) for a in acts],
                "losses": [float(loss_fn(s1(a), y)) for a, y in zip(acts, ys)],
                "loss": float(loss_fn(s1(s0(full["x"])), full["y"]))}


def judge(metrics: list[dict], seed: int) -> tuple[list[str], str]:
    """(problems, summary): the ranks' records against the one-process model of `seed`
    (`exercise_pp_judge`)."""
    return judge_against(metrics, reference(seed))


def work_file():
    """Where the notebook writes the student's script (`%%writefile {MY_PP}`)."""
    return ranks.work_file("gpipe_forward.py")


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 120.0,
          seed: int | None = None) -> bool:
    """Launch `script` on 2 gloo ranks with a fresh seed and show the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    handed = handout(HANDOUT)
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC, todo="both stages' parts",
                              seed_env=SEED_ENV, reference=solution, timeout=timeout, seed=seed,
                              echo=echoed(script, handed, echo), handout=handed)
