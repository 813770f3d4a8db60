"""Notebook 06's exercise `06-tensor-parallel`: a Megatron MLP written by hand on 2 gloo ranks.

The student writes `tp_mlp(x, w1, b1, w2, b2)` in a script that ends with `run(tp_mlp)`. Each
launched rank (`run`) builds the MLP `y = gelu(x W1^T + b1) W2^T + b2` from the check's seed and
hands the student's function ONLY its slices: rows r*H/t .. (r+1)*H/t of W1 and of b1
(column-parallel), the matching columns of W2 (row-parallel) and b2 whole. With a part of the
weights, no rank can compute the output alone: the ranks must communicate. The rank runs the
forward and `(y * G).sum().backward()` (G a fixed upstream gradient) and reports the output, the
input's gradient, its slices' gradients and every collective call (`dltutor.grading.calls`: only
all_reduce is allowed; each call is recorded with its shape and whether it ran in the forward or
the backward).

In the kernel, `check(path)` compares each rank with the one-process MLP in float64: output and
input gradient within TOL, each slice's gradient equal to the matching slice of the full
gradient, and exactly one all-reduce of a (tokens x d_model) tensor in each direction (Megatron's
g forward, f backward). Known mistakes are named: b2 added on every rank before the all-reduce,
a rank's output that is only its partial sum, an input gradient that was never all-reduced.
"""
from __future__ import annotations

import os
import traceback

from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks
from dltutor.grading.calls import CallLog, watched

EXERCISE = "06-tensor-parallel"
NPROC = 2
TOKENS, D_MODEL, HIDDEN = 6, 8, 16          # hidden splits into 2 slices of 8
TOL = 1e-6
SEED_ENV = "DLTUTOR_EXERCISE_SEED"
SOLUTION = "06_model_parallel/solutions/tp_mlp.py"
NAMES = {"w1": "W1 rows", "b1": "b1 slice", "w2": "W2 columns", "b2": "b2"}


# ------------------------------------------------------------------ the MLP, in both places
def build(seed: int) -> dict:
    """The whole MLP, its input x and the upstream gradient G, in float64, from `seed`."""
    import torch
    g = torch.Generator().manual_seed(seed)

    def r(*shape, s=1.0):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * s
    return {"w1": r(HIDDEN, D_MODEL, s=D_MODEL ** -0.5), "b1": r(HIDDEN, s=0.5),
            "w2": r(D_MODEL, HIDDEN, s=HIDDEN ** -0.5), "b2": r(D_MODEL),
            "x": r(TOKENS, D_MODEL), "G": r(TOKENS, D_MODEL)}


def part(rows: int, rank: int, world: int) -> slice:
    n = rows // world
    return slice(rank * n, (rank + 1) * n)


def shard(full: dict, rank: int, world: int) -> dict:
    """Rank `rank`'s slices: W1's and b1's rows (column-parallel), W2's columns, b2 whole."""
    s = part(HIDDEN, rank, world)
    return {"w1": full["w1"][s], "b1": full["b1"][s], "w2": full["w2"][:, s], "b2": full["b2"]}


def forward(x, w1, b1, w2, b2):
    import torch.nn.functional as F
    y = F.gelu(x @ w1.T + b1) @ w2.T
    return y if b2 is None else y + b2


# ------------------------------------------------------------------ inside the launched ranks
def run(tp_mlp) -> None:
    """Give `tp_mlp` this rank's slices, run forward and backward, report what came out."""
    with _dist.session() as ctx:
        full = build(int(os.environ.get(SEED_ENV, "0")))
        mine = {k: v.clone().requires_grad_() for k, v in shard(full, ctx.rank,
                                                                 ctx.world_size).items()}
        x, upstream = full["x"].clone().requires_grad_(), full["G"]
        del full                              # the rank keeps only its slices
        log = CallLog()
        why = "tensor parallelism here is one all-reduce forward and one backward (dist.all_reduce)"
        try:
            with watched(log, record=("all_reduce",), namespaces=[tp_mlp.__globals__], why=why):
                log.phase = "forward"
                y = tp_mlp(x, mine["w1"], mine["b1"], mine["w2"], mine["b2"])
                if not hasattr(y, "shape") or tuple(y.shape) != (TOKENS, D_MODEL):
                    raise TypeError(f"tp_mlp must return the ({TOKENS}, {D_MODEL}) output "
                                    f"tensor, not {getattr(y, 'shape', type(y).__name__)}")
                log.phase = "backward"
                (y * upstream).sum().backward()
        except Exception as exc:
            _dist.report(event="error", phase=log.phase, error="".join(
                traceback.format_exception_only(type(exc), exc)).strip())
            raise
        grads = {k: None if t.grad is None else t.grad.tolist() for k, t in mine.items()}
        _dist.report(event="tp_mlp", out=y.detach().tolist(),
                     x_grad=None if x.grad is None else x.grad.tolist(), grads=grads,
                     calls=log.calls)


# ------------------------------------------------------------------ in the kernel
def reference(seed: int, world: int = NPROC) -> dict:
    """The one-process output and gradients, and what each rank alone would give (partials)."""
    import torch
    full = build(seed)
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
            "partial": partial, "partial_x_grad": partial_x_grad}


def _close(a, b) -> bool:
    """Equal within TOL; `b` may broadcast (a bias) but not widen `a`."""
    try:
        return a.shape == (a - b).shape and float((a - b).abs().max()) <= TOL
    except RuntimeError:        # shapes that do not broadcast
        return False


def _output_problem(r: int, got, ref: dict, world: int) -> str | None:
    diff = float((got - ref["out"]).abs().max())
    if diff <= TOL:
        return None
    head = f"rank {r}, output: max |difference| {diff:.3g} from the one-process MLP"
    if _close(got - ref["out"], ref["b2"] * (world - 1)):
        why = ("off by exactly b2 x (world_size - 1): b2 added on every rank before the "
               "all-reduce: add it once, after")
    elif _close(got, ref["partial"][r] + ref["b2"]) or _close(got, ref["partial"][r]):
        why = (f"rank {r}'s output is only its partial sum: all-reduce the partial outputs "
               "(Megatron's g) before adding b2")
    elif _close(got - ref["b2"], (ref["out"] - ref["b2"]) * world):
        why = f"{world} times the output: the partial sums were added more than once"
    else:
        why = ("not a known slip: check column-parallel (W1 rows, b1 slice), GeLU on the "
               "slice, row-parallel (W2 columns), the all-reduce, then b2")
    return f"{head}: {why}"


def _x_grad_problem(r: int, got, ref: dict, world: int) -> str | None:
    if got is None:
        return f"rank {r}, input gradient: x got none: compute with the x you were given"
    diff = float((got - ref["x_grad"]).abs().max())
    if diff <= TOL:
        return None
    head = f"rank {r}, input gradient: max |difference| {diff:.3g} from the one-process MLP"
    if _close(got, ref["partial_x_grad"][r]):
        return (f"{head}: it is only rank {r}'s part: the backward of f: all-reduce the input "
                "gradient")
    if _close(got, ref["partial_x_grad"][r] * world):
        return (f"{head}: it is rank {r}'s part, {world} times: the backward all-reduce ran in g "
                "(at the output), not in f: g's backward is the identity, f's backward "
                "all-reduces the input gradient")
    if _close(got, ref["x_grad"] * world):
        return (f"{head}: {world} times too large: the gradient was all-reduced twice (g's "
                "backward is the identity; only f's backward all-reduces)")
    return head


def _grad_problems(r: int, grads: dict, ref: dict, world: int) -> list[str]:
    import torch
    out = []
    s = part(HIDDEN, r, world)
    want = {"w1": ref["grads"]["w1"][s], "b1": ref["grads"]["b1"][s],
            "w2": ref["grads"]["w2"][:, s], "b2": ref["grads"]["b2"]}
    where = {"w1": f"rows {s.start}..{s.stop - 1}", "b1": f"elements {s.start}..{s.stop - 1}",
             "w2": f"columns {s.start}..{s.stop - 1}", "b2": "all of it"}
    for k, expected in want.items():
        if grads.get(k) is None:
            out.append(f"rank {r}, {NAMES[k]} gradient: none: compute with the tensors you were "
                       "given (they require grad), not copies")
            continue
        got = torch.tensor(grads[k], dtype=torch.float64)
        diff = float((got - expected).abs().max()) if got.shape == expected.shape else float("inf")
        if diff > TOL:
            times = (f": {world} times the gradient (g's backward must be the identity)"
                     if _close(got, expected * world) else "")
            out.append(f"rank {r}, {NAMES[k]} gradient: max |difference| {diff:.3g} from the "
                       f"one-process gradient's {where[k]}{times}")
    return out


def _calls_problem(r: int, calls: list, numbers_right: bool) -> str | None:
    shape = [TOKENS, D_MODEL]
    fwd = [c for c in calls if c["phase"] == "forward"]
    bwd = [c for c in calls if c["phase"] == "backward"]
    if [c.get("shape") for c in fwd] == [shape] and [c.get("shape") for c in bwd] == [shape]:
        return None
    seen = (f"rank {r} made {len(fwd)} all-reduce(s) in the forward "
            f"{[c.get('shape') for c in fwd]} and {len(bwd)} in the backward "
            f"{[c.get('shape') for c in bwd]}; Megatron makes exactly one each way, of a "
            f"{TOKENS} x {D_MODEL} tensor (g: the partial outputs; f: the input gradient)")
    if numbers_right and not calls:
        seen += (": the right numbers without any communication mean the work was not split "
                 "(each rank was given only its slices)")
    return seen


def judge(metrics: list[dict], seed: int, world: int = NPROC) -> tuple[list[str], str]:
    """(problems, summary): every rank's output, gradients and all-reduces against one process."""
    import torch
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return [f"rank {e['rank']} failed in the {e.get('phase') or 'setup'}: {e['error']}"
                for e in errors], ""
    reports = sorted((m for m in metrics if m.get("event") == "tp_mlp"), key=lambda m: m["rank"])
    if [m["rank"] for m in reports] != list(range(world)):
        return [f"rank(s) {[m['rank'] for m in reports]} of {world} reported (once each) through "
                "run(tp_mlp): keep the last line of the script"], ""
    ref = reference(seed, world)
    problems = []
    for m in reports:
        r = m["rank"]
        numeric = [_output_problem(r, torch.tensor(m["out"], dtype=torch.float64), ref, world),
                   _x_grad_problem(r, None if m["x_grad"] is None else
                                   torch.tensor(m["x_grad"], dtype=torch.float64), ref, world),
                   *_grad_problems(r, m["grads"], ref, world)]
        numeric = [p for p in numeric if p]
        problems += numeric + [p for p in [_calls_problem(r, m["calls"], not numeric)] if p]
    errs = max(float((torch.tensor(m["out"], dtype=torch.float64) - ref["out"]).abs().max())
               for m in reports)
    return problems, (f"on {world} ranks, output and input gradient match the one-process MLP "
                      f"(max output error {errs:.1e}), every rank's W1/b1/W2/b2 slice gradient "
                      f"matches its slice of the full gradient, and each rank made one "
                      f"all-reduce of {TOKENS} x {D_MODEL} forward (g) and one backward (f)")


def work_file():
    """Where the notebook writes the student's script (`%%writefile {MY_TP}`)."""
    return ranks.work_file("tp_mlp.py")


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 120.0,
          seed: int | None = None) -> bool:
    """Launch `script` on 2 gloo ranks with a fresh seed and show the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC, todo='f, g and tp_mlp',
                              seed_env=SEED_ENV, reference=solution, echo=echo, timeout=timeout,
                              seed=seed)
