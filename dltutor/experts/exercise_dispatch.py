"""Notebook 09's exercise `09-moe-dispatch`: expert-parallel dispatch and combine with all-to-all.

The student writes `moe(x, experts, weights, expert, num_experts)` in a script that ends with
`run(moe)`: this rank's tokens go to the ranks that own their experts (count exchange, then
`all_to_all_single` with input/output split sizes, rows grouped by destination rank), the local
experts run on what arrived (`expert(e, rows)`, given: it refuses an expert another rank owns), and
the results come back (all-to-all the other way), in the original order, weighted and summed over
each token's k choices.

Each launched rank draws the routing of the check's seed (`routing`): uneven token counts per rank,
top-1 or top-2, one expert that gets no token, one rank that sends nothing to the other (all its
tokens stay on its own experts). Every `all_to_all_single` the student makes is recorded (dtype,
rows, split sizes) and checked before it runs: split sizes that do not pair up across the ranks
raise one RuntimeError on every rank that names the mismatch (gloo itself aborts the process on
a size mismatch, or silently reads garbage). Other collectives are refused.

In the kernel, `judge` (`dispatch_judge`) compares each rank's output with the one-process MoE in
float64 and names the usual mistakes.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import os
import random
import time
import traceback

from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.experts.dispatch_judge import apply_expert, judge_against
from dltutor.grading import ranks
from dltutor.grading.calls import CallLog, watched

EXERCISE = "09-moe-dispatch"
NPROC = 2
SEED_ENV = "DLTUTOR_EXERCISE_SEED"
SOLUTION = "09_long_context/solutions/moe_dispatch.py"
NOTEBOOK = "09_long_sequences_and_experts.ipynb"
FUNCTION = "moe"
HANDOUT = "MY_MOE"               # the notebook's variable naming the student's script
WHY = "dispatch and combine are dist.all_to_all_single calls (the counts too)"


# ------------------------------------------------------------------ the routing, in both places
def routing(seed: int, world: int = NPROC) -> dict:
    """Tokens, experts and routing of the check with `seed` (float64): x [rank] [T_r, d], experts
    and weights [rank] [T_r, k], W [E, d, d] and b [E, d] of each expert, `empty` (the expert no
    token chooses) and `silent` (the rank whose tokens all stay on its own experts)."""
    import torch
    rng = random.Random(seed)
    per_rank, top_k, d = rng.choice((2, 3)), rng.choice((1, 2)), rng.choice((3, 4, 5))
    num_experts = per_rank * world
    tokens = rng.sample(range(2, 8), world)                  # a different count on every rank
    silent = rng.randrange(world)
    empty = rng.choice([e for e in range(num_experts) if e // per_rank != silent])
    own = [e for e in range(silent * per_rank, (silent + 1) * per_rank)]
    others = [e for e in range(num_experts) if e != empty]
    experts = []
    for r in range(world):
        pool = own if r == silent else others
        chosen = [rng.sample(pool, top_k) for _ in range(tokens[r])]
        if r != silent and all(e // per_rank == r for row in chosen for e in row):
            chosen[0][0] = own[0] if own[0] not in chosen[0] else own[1]   # send to the silent rank
        experts.append(torch.tensor(chosen, dtype=torch.long))
    g = torch.Generator().manual_seed(seed)
    weights = [torch.softmax(torch.randn(t, 2, generator=g, dtype=torch.float64), -1)[:, :top_k]
               for t in tokens]       # top-2: renormalized over the two; top-1: its gate prob (< 1)
    return {"x": [torch.randn(t, d, generator=g, dtype=torch.float64) for t in tokens],
            "experts": experts, "weights": weights, "num_experts": num_experts, "top_k": top_k,
            "W": torch.randn(num_experts, d, d, generator=g, dtype=torch.float64) * d ** -0.5,
            "b": torch.randn(num_experts, d, generator=g, dtype=torch.float64) * 0.5,
            "empty": empty, "silent": silent, "d_model": d}


# ------------------------------------------------------------------ inside the launched ranks
def _recording(original, log: CallLog, world: int):
    """all_to_all_single that records each call and checks, with every rank, that the split
    sizes pair up before it runs (gloo aborts on a mismatch)."""
    import torch
    import torch.distributed as dist
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    signature = inspect.signature(original)

    def splits(given, rows: int, what: str) -> list[int]:
        if given is None:
            if rows % world:
                raise RuntimeError(f"all_to_all_single without {what}_split_sizes splits {rows} "
                                   f"rows evenly over {world} ranks: it cannot")
            return [rows // world] * world
        given = [int(n) for n in given]
        if len(given) != world or sum(given) != rows:
            raise RuntimeError(f"all_to_all_single: {what}_split_sizes {given} must be {world} "
                               f"numbers that add up to the {what} tensor's {rows} rows")
        return given

    def call(*args, **kwargs):
        a = signature.bind(*args, **kwargs).arguments
        out, inp = a["output"], a["input"]
        entry = {"phase": log.phase, "dtype": str(inp.dtype).replace("torch.", ""),
                 "in_rows": int(inp.shape[0]), "out_rows": int(out.shape[0]),
                 "in_splits": a.get("input_split_sizes"), "out_splits": a.get("output_split_sizes")}
        entry = {k: (list(map(int, v)) if k.endswith("splits") and v is not None else v)
                 for k, v in entry.items()}
        log.calls.append(entry)
        sent = splits(a.get("input_split_sizes"), inp.shape[0], "input")
        expected = splits(a.get("output_split_sizes"), out.shape[0], "output")
        width = [math.prod(inp.shape[1:]), math.prod(out.shape[1:])]       # elements per row
        mine = torch.tensor(sent + expected + width, dtype=torch.long)
        every = torch.empty(world * mine.numel(), dtype=torch.long)
        gather(every, mine)
        every = every.view(world, -1).tolist()
        for s in range(world):
            for t in range(world):
                n_sent, n_expected = every[s][t], every[t][world + s]
                if n_sent * every[s][-2] != n_expected * every[t][-1]:
                    raise RuntimeError(f"all_to_all_single split sizes do not pair up: rank {s} "
                                       f"sends {n_sent} rows to rank {t}, which expects "
                                       f"{n_expected} from it")
        return original(*args, **kwargs)
    return call


@contextlib.contextmanager
def recorded(log: CallLog, namespace: dict, world: int):
    """`all_to_all_single` recorded and checked in torch.distributed and the student's module."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    original = dist.all_to_all_single
    stand_in = _recording(original, log, world)
    spaces = [s for s in (vars(dist), vars(c10d), namespace)]
    saved = [(s, k) for s in spaces for k, v in list(s.items()) if v is original]
    try:
        for s, k in saved:
            s[k] = stand_in
        yield log
    finally:
        for s, k in saved:
            s[k] = original


def error_record(exc: BaseException, fn, **extra) -> dict:
    """What a rank reports when the student's code raised: the error, the student's line, when."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    mine = [f for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == fn.__code__.co_filename]
    if mine:
        text += f" (at your line {mine[-1].lineno}: {mine[-1].line})"
    return {"event": "error", "error": text, "t": time.time(), **extra}


def attempt(moe, rank: int, world: int, seed: int) -> tuple[dict, BaseException | None]:
    """Run the student's `moe` on this rank's tokens: (the record to report, the exception the
    student's code raised or None). The process group must be up."""
    data = routing(seed, world)
    per_rank = data["num_experts"] // world

    def expert(e, rows):
        e = int(e)
        if e // per_rank != rank:
            raise ValueError(f"expert {e} lives on rank {e // per_rank}, not on rank {rank}: "
                             "rows for it must be sent there")
        return apply_expert(data, e, rows)
    log = CallLog(phase="moe")
    try:
        with recorded(log, moe.__globals__, world), watched(
                CallLog(), allow=("all_to_all_single",), namespaces=[moe.__globals__], why=WHY):
            y = moe(data["x"][rank].clone(), data["experts"][rank].clone(),
                    data["weights"][rank].clone(), expert, data["num_experts"])
        want = tuple(data["x"][rank].shape)
        if not hasattr(y, "shape") or tuple(y.shape) != want:
            raise TypeError(f"moe must return this rank's output {want}, not "
                            f"{getattr(y, 'shape', type(y).__name__)}")
    except Exception as exc:  # noqa: BLE001 - the student's code: report it, the caller raises
        return error_record(exc, moe, calls=log.calls), exc
    return {"event": "moe", "out": y.detach().tolist(), "calls": log.calls}, None


def run(moe) -> None:
    """The last line of the student's script: run `moe` on this rank, report what came out."""
    with _dist.session(use_cuda=False) as ctx:
        record, exc = attempt(moe, ctx.rank, ctx.world_size, int(os.environ.get(SEED_ENV, "0")))
        _dist.report(**record)
        if exc is not None:
            raise exc


# ------------------------------------------------------------------ in the kernel
def judge(metrics: list[dict], seed: int, world: int = NPROC) -> tuple[list[str], str]:
    """(problems, summary): the ranks' reports against the one-process MoE (`dispatch_judge`)."""
    return judge_against(metrics, routing(seed, world), world)


def work_file():
    """Where the notebook writes the student's script (`%%writefile {MY_MOE}`)."""
    return ranks.work_file("moe_dispatch.py")


def handout(variable: str = HANDOUT) -> str | None:
    """The script as handed out: notebook 09's `%%writefile {variable}` cell (None if absent)."""
    return ranks.handout(NOTEBOOK, variable)


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 120.0,
          seed: int | None = None) -> bool:
    """Launch `script` on 2 gloo ranks with a fresh seed and show the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    handed = handout(HANDOUT)
    quiet = handed is not None and ranks.untouched(script, handed)   # the TODOs: no tracebacks
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC,
                              todo="the count exchange, dispatch, experts and combine",
                              seed_env=SEED_ENV, reference=solution, timeout=timeout, seed=seed,
                              echo=echo and not quiet, handout=handed)
