"""Notebook 06's exercise `06-pipeline`: a GPipe forward over 2 stages, written by hand.

The student writes `gpipe_forward(stage, rank, data, m, loss_fn, width)` in a script that ends
with `run(gpipe_forward)`. Each launched rank (`run`) builds the model from the check's seed and
keeps ONLY its own stage: rank 0 gets the first half of the layers and the inputs, rank 1 the
second half and the targets. Rank 0 must cut the batch into m micro-batches, run its stage on
each and send each activation (width `width`) to rank 1; rank 1 receives them, runs its stage and
returns the m micro-batch losses, in order. Collectives are refused while the student's function
runs; every send/recv/isend/irecv is recorded (`dltutor.grading.calls`) with its shape and, for a
send, the sum of what it sent.

In the kernel, `check(path)` compares with the model on one process: each micro-batch's loss and
their mean (= the whole batch's loss) within TOL, and it reads the recorded sends: m of them, the
k-th carrying micro-batch k's stage-0 activations (identified by their sum), so it can say "sent
the whole batch at once", "micro-batch 2 sent second" or "nothing crossed".
"""
from __future__ import annotations

import os
import traceback

from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks
from dltutor.grading.calls import POINT_TO_POINT, CallLog, watched
from dltutor.model_parallel.exercise_tp import SEED_ENV

EXERCISE = "06-pipeline"
NPROC = 2
BATCH, MICRO, D_IN, WIDTH, D_OUT = 8, 4, 6, 8, 3      # 4 micro-batches of 2 samples
TOL = 1e-6
SOLUTION = "06_model_parallel/solutions/gpipe_forward.py"
SENDS = ("send", "isend")


# ------------------------------------------------------------------ the model, in both places
def build(seed: int) -> dict:
    """The two stages' layers, the inputs and the targets, in float64, from `seed`."""
    import torch
    g = torch.Generator().manual_seed(seed)

    def r(*shape, s=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * s
    return {"stage0": [(r(WIDTH, D_IN, s=D_IN ** -0.5), r(WIDTH, s=0.3)),
                       (r(WIDTH, WIDTH, s=WIDTH ** -0.5), r(WIDTH, s=0.3))],
            "stage1": [(r(WIDTH, WIDTH, s=WIDTH ** -0.5), r(WIDTH, s=0.3)),
                       (r(D_OUT, WIDTH, s=WIDTH ** -0.5), r(D_OUT, s=0.3))],
            "x": r(BATCH, D_IN), "y": r(BATCH, D_OUT)}


def stage(layers):
    """A stage as an nn.Sequential of Linear layers, each followed by Tanh except the model's
    last (its output, D_OUT wide, goes to the loss)."""
    import torch
    mods = []
    for i, (w, b) in enumerate(layers):
        lin = torch.nn.Linear(w.shape[1], w.shape[0], dtype=torch.float64)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        mods.append(lin)
        if i < len(layers) - 1 or w.shape[0] != D_OUT:
            mods.append(torch.nn.Tanh())
    return torch.nn.Sequential(*mods)


def loss_fn(out, target):
    import torch.nn.functional as F
    return F.mse_loss(out, target)


# ------------------------------------------------------------------ inside the launched ranks
def run(gpipe_forward) -> None:
    """Give `gpipe_forward` this rank's stage and data, report its losses and its messages."""
    with _dist.session() as ctx:
        full = build(int(os.environ.get(SEED_ENV, "0")))
        mine = stage(full[f"stage{ctx.rank}"])
        data = (full["x"] if ctx.rank == 0 else full["y"]).clone()
        del full                              # the rank keeps only its stage and its data
        log = CallLog(phase="forward")
        why = "the stages talk point to point here: dist.send/recv (or isend/irecv)"
        try:
            with watched(log, record=("send", "recv", "isend", "irecv"),
                         allow=("batch_isend_irecv",), namespaces=[gpipe_forward.__globals__],
                         why=why):
                losses = gpipe_forward(mine, ctx.rank, data, MICRO, loss_fn, WIDTH)
            if ctx.rank == ctx.world_size - 1:
                losses = [float(v.detach() if hasattr(v, "detach") else v) for v in losses]
        except Exception as exc:
            _dist.report(event="error", error="".join(
                traceback.format_exception_only(type(exc), exc)).strip())
            raise
        _dist.report(event="gpipe", losses=losses if ctx.rank == ctx.world_size - 1 else None,
                     calls=[c for c in log.calls if c["name"] in POINT_TO_POINT])


# ------------------------------------------------------------------ in the kernel
def reference(seed: int) -> dict:
    """Per micro-batch: the activation's sum that crosses, and the loss; the whole batch's loss."""
    import torch
    full = build(seed)
    s0, s1 = stage(full["stage0"]), stage(full["stage1"])
    with torch.no_grad():
        xs, ys = full["x"].chunk(MICRO), full["y"].chunk(MICRO)
        acts = [s0(x) for x in xs]
        return {"sums": [float(a.sum()) for a in acts],
                "whole_sum": float(s0(full["x"]).sum()),
                "losses": [float(loss_fn(s1(a), y)) for a, y in zip(acts, ys)],
                "loss": float(loss_fn(s1(s0(full["x"])), full["y"]))}


def _which(total: float, sums: list[float]) -> int | None:
    hits = [k for k, s in enumerate(sums) if abs(total - s) <= 1e-9 * max(1.0, abs(s))]
    return hits[0] if hits else None


def _send_problems(sends: list, recvs: list, ref: dict) -> list[str]:
    mb = [BATCH // MICRO, WIDTH]
    if not sends:
        return ["nothing crossed: rank 0 made no dist.send/isend, so rank 1 cannot have "
                "computed from rank 0's activations (each rank holds only its own stage)"]
    if len(sends) == 1 and sends[0].get("shape") == [BATCH, WIDTH]:
        return [f"rank 0 sent the whole batch at once (one send of {BATCH} x {WIDTH}): cut it "
                f"into m = {MICRO} micro-batches of {mb[0]} and send each as soon as stage 0 "
                "has it; that is what lets the stages overlap"]
    out = []
    if len(sends) != MICRO:
        out.append(f"rank 0 made {len(sends)} send(s), {[s.get('shape') for s in sends]}; GPipe "
                   f"sends one activation of {mb[0]} x {WIDTH} per micro-batch, m = {MICRO}")
    for k, s in enumerate(sends[:MICRO]):
        got = _which(s.get("sum", float("nan")), ref["sums"])
        if s.get("shape") != mb:
            out.append(f"send {k} of rank 0 was {s.get('shape')}, a micro-batch's activation "
                       f"is {mb[0]} x {WIDTH}")
        elif got is None:
            out.append(f"send {k} of rank 0 carried values that are no micro-batch's stage-0 "
                       "activations: send stage(micro_batch), after the stage ran")
        elif got != k:
            out.append(f"send {k} of rank 0 carried micro-batch {got}'s activations: send the "
                       f"micro-batches in order 0..{MICRO - 1}, as rank 1 pairs them with its "
                       "targets in that order")
    if len(recvs) != len(sends):
        out.append(f"rank 1 made {len(recvs)} receive(s) for rank 0's {len(sends)} send(s)")
    return out


def _loss_problems(losses, ref: dict) -> list[str]:
    if not isinstance(losses, list) or len(losses) != MICRO:
        n = len(losses) if isinstance(losses, list) else 0
        return [f"rank 1 returned {n} loss(es): return the list of the m = {MICRO} micro-batch "
                "losses, in order"]
    out = []
    for k, (got, want) in enumerate(zip(losses, ref["losses"])):
        if abs(got - want) > TOL:
            out.append(f"rank 1, loss of micro-batch {k}: {got:.6g}, the one-process model "
                       f"gives {want:.6g} (|difference| {abs(got - want):.3g})")
    mean = sum(losses) / MICRO
    if abs(mean - ref["loss"]) > TOL:
        out.append(f"rank 1, mean loss {mean:.6g} vs the one-process loss on the whole batch "
                   f"{ref['loss']:.6g} (|difference| {abs(mean - ref['loss']):.3g})")
    return out


def judge(metrics: list[dict], seed: int) -> tuple[list[str], str]:
    """(problems, summary): what crossed between the stages, and the losses, against one process."""
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        hang = any("timed out" in e["error"].lower() or "timeout" in e["error"].lower()
                   for e in errors)
        return [f"rank {e['rank']} failed: {e['error']}" for e in errors] + (
            ["a rank waited until the timeout: every recv needs a matching send of the same "
             "shape on the other rank"] if hang else []), ""
    reports = {m["rank"]: m for m in metrics if m.get("event") == "gpipe"}
    if sorted(reports) != list(range(NPROC)):
        return [f"rank(s) {sorted(reports)} of {NPROC} reported through run(gpipe_forward): "
                "keep the last line of the script"], ""
    ref = reference(seed)
    calls = {r: reports[r]["calls"] for r in reports}
    sends = [c for c in calls[0] if c["name"] in SENDS]
    recvs = [c for c in calls[1] if c["name"] in ("recv", "irecv")]
    problems = _send_problems(sends, recvs, ref) + _loss_problems(reports[1]["losses"], ref)
    mean = sum(reports[1]["losses"] or [0.0]) / MICRO
    return problems, (f"{MICRO} micro-batches of {BATCH // MICRO} crossed from stage 0 to stage "
                      f"1 in order ({len(sends)} sends of {BATCH // MICRO} x {WIDTH}); mean loss "
                      f"{mean:.6f} = the one-process loss on the whole batch "
                      f"(|difference| {abs(mean - ref['loss']):.1e})")


def work_file():
    """Where the notebook writes the student's script (`%%writefile {MY_PP}`)."""
    return ranks.work_file("gpipe_forward.py")


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 120.0,
          seed: int | None = None) -> bool:
    """Launch `script` on 2 gloo ranks with a fresh seed and show the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC, todo="both stages' parts",
                              seed_env=SEED_ENV, reference=solution, echo=echo, timeout=timeout,
                              seed=seed)
