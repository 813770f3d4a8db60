"""Notebook 05's exercise: one reduce-scatter step of the ring, written with point-to-point.

The student writes `reduce_scatter_step(chunks, rank, world_size, step)` in a script that ends
with `run(reduce_scatter_step)`. In the kernel, `check(path)` launches that script on 3 gloo
ranks, then (if every step was right) on 4. Each rank (`run`) draws a fresh random vector per
case (whole numbers in float32, so every sum is exact and no rank can know another's data), cuts
it into the ring's chunks with `torch.tensor_split` (the first `length % N` chunks one element
longer: `ring.chunk_bounds`), calls the student's function for steps 1 .. N-1 and reports:

- its vector before the steps (`start`), after each step (`state`) and `dist.all_reduce`'s result
  (`reference`), for each case (vector lengths the kernel picks per check: never a multiple of N
  only, so uneven chunks are always there);
- every send and receive of the student's step as it is made (`call`: peer, elements, bytes, and
  the sum of what a send carries), through `dltutor.grading.calls` (collectives are refused while
  the step runs); streamed, so a rank that dies inside gloo still leaves its calls behind;
- an `error` with the student's own line, if the step raises (a hang ends at the ranks' timeout).

`dltutor.allreduce.exercise_judge` compares all that with the step model, `ring.ring_steps`.
"""
from __future__ import annotations

import contextlib
import os
import random
import secrets
import time
import traceback

from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks
from dltutor.grading.calls import CallLog, watched
from dltutor.grading.verdict import not_yet, solved, wrong

EXERCISE = "05-reduce-scatter"

WORLD_SIZES = (3, 4)         # the check runs 3 ranks, then 4 (only if 3 was right)
NPROC = WORLD_SIZES[0]
LENGTHS_ENV = "DLTUTOR_RS_LENGTHS"
DEFAULT_LENGTHS = (7, 11, 9)  # by hand (torchrun): remainders 1, 2 and 0 on 3 ranks
VALUE_RANGE = 2 ** 20         # |element| <= 2**20: sums of <= 8 of them stay exact in float32
DIST_TIMEOUT = 10             # s a rank waits for a message: a tiny step never needs more
P2P = ("send", "recv", "isend", "irecv")


# ------------------------------------------------------------------ inside the launched ranks
def case_lengths() -> list[int]:
    """The vector lengths of this launch's cases (the kernel's choice, else DEFAULT_LENGTHS)."""
    raw = os.environ.get(LENGTHS_ENV, "")
    return [int(x) for x in raw.split(",") if x.strip()] or list(DEFAULT_LENGTHS)


def fresh_vector(length: int):
    """Whole numbers in [-2**20, 2**20] as float32, from a seed no other rank knows."""
    import torch
    gen = torch.Generator().manual_seed(secrets.randbits(62))
    return torch.randint(-VALUE_RANGE, VALUE_RANGE + 1, (length,), generator=gen).float()


class _Streamed(list):
    """A CallLog's list of calls that also reports each call the moment it is made."""

    def __init__(self, **where):
        super().__init__()
        self.where = where

    def append(self, entry):
        super().append(entry)
        _dist.report(event="call", **self.where, **_message(entry))


@contextlib.contextmanager
def _peers_as_ranks(namespaces):
    """Inside `watched`: pass a peer given as group_dst=/group_src= (as batch_isend_irecv passes
    each P2POp's, or a student may) as dst=/src=, which the call log reads; in the default group
    the two are the same rank."""
    import torch.distributed as tdist
    import torch.distributed.distributed_c10d as c10d

    def as_rank(fn):
        def call(*args, **kwargs):
            group = kwargs.get("group", args[2] if len(args) > 2 else None)
            if group is None or group is c10d._get_default_group():
                for key in ("dst", "src"):
                    if kwargs.get(f"group_{key}") is not None and kwargs.get(key) is None:
                        kwargs[key] = kwargs.pop(f"group_{key}")
            return fn(*args, **kwargs)
        return call
    by_id = {id(getattr(tdist, n)): as_rank(getattr(tdist, n)) for n in P2P}
    spaces = [vars(tdist), vars(c10d), *namespaces]
    saved = [(space, key, value) for space in spaces for key, value in list(space.items())
             if id(value) in by_id]
    for space, key, value in saved:
        space[key] = by_id[id(value)]
    try:
        yield
    finally:
        for space, key, value in reversed(saved):
            space[key] = value


def _message(entry: dict) -> dict:
    import torch
    numel = 1
    for d in entry.get("shape", [0]):
        numel *= d
    dtype = entry.get("dtype", "float32")
    size = getattr(torch, dtype, torch.float32)
    itemsize = torch.empty(0, dtype=size).element_size() if isinstance(size, torch.dtype) else 4
    return {"name": entry["name"], "peer": entry.get("peer"), "numel": numel,
            "nbytes": numel * itemsize, "dtype": dtype, "sum": entry.get("sum")}


def _student_line(exc: BaseException, step_fn) -> str:
    """"line 12: chunks[c] += x": the last line of the student's file the error passed through."""
    mine = [f for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == step_fn.__code__.co_filename]
    return f"line {mine[-1].lineno}: {(mine[-1].line or '').strip()}" if mine else ""


def _step(step_fn, chunks, ctx, case: int, step: int) -> None:
    log = CallLog()
    log.calls = _Streamed(case=case, step=step)
    spaces = [step_fn.__globals__]
    try:
        with watched(log, record=P2P, allow=("batch_isend_irecv",), namespaces=spaces,
                     why="write the step with send/recv (isend/irecv, batch_isend_irecv)"), \
                _peers_as_ranks(spaces):
            step_fn(chunks, ctx.rank, ctx.world_size, step)
    except Exception as exc:
        _dist.report(event="error", case=case, step=step, t=time.time(),
                     error="".join(traceback.format_exception_only(type(exc), exc)).strip(),
                     line=_student_line(exc, step_fn))
        raise


def run(step_fn, lengths=None) -> None:
    """Run the N-1 reduce-scatter steps of `step_fn` on this rank for every case, reporting."""
    import torch
    import torch.distributed as tdist
    with _dist.session() as ctx:
        for case, length in enumerate(lengths or case_lengths()):
            vec = fresh_vector(length).to(ctx.device)
            start = vec.clone()
            _dist.report(event="start", case=case, length=length, values=start.cpu().tolist())
            views = list(torch.tensor_split(vec, ctx.world_size))
            chunks = list(views)
            for step in range(1, ctx.world_size):
                _step(step_fn, chunks, ctx, case, step)
                replaced = [i for i, c in enumerate(chunks)
                            if not (isinstance(c, torch.Tensor) and c.data_ptr() ==
                                    views[i].data_ptr() and c.shape == views[i].shape)]
                _dist.report(event="state", case=case, step=step, values=vec.cpu().tolist(),
                             replaced=replaced)
            if ctx.backend is not None:
                tdist.all_reduce(start)          # what torch.distributed makes of the same data
            _dist.report(event="reference", case=case, values=start.cpu().tolist())


# ------------------------------------------------------------------ in the kernel
def pick_lengths(n: int, rng: random.Random) -> list[int]:
    """Three vector lengths for `n` ranks: remainders 1 and n-1 (uneven chunks) and any."""
    return [n * rng.randint(2, 4) + 1, n * rng.randint(5, 8) + n - 1,
            n * rng.randint(1, 3) + rng.randrange(n)]


def solved_text(launches: list[tuple[int, list[int]]]) -> str:
    """The evidence of a solved check: the (world_size, vector lengths) of every launch."""
    from dltutor.allreduce import ring
    sizes = [4 * (b - a) for n, lengths in launches for length in lengths
             for a, b in ring.chunk_bounds(length, n)]
    runs = " and ".join(f"{n} ranks (vectors of {', '.join(map(str, lengths))} elements)"
                        for n, lengths in launches)
    n = launches[0][0]
    owners = ", ".join(f"P{r} chunk {ring.owner_after_reduce_scatter(r, n)}" for r in range(n))
    return (f"on {runs}, fresh random data: in every step each rank sent exactly one chunk "
            f"({min(sizes)}-{max(sizes)} bytes, the one the schedule names) to its right "
            f"neighbour and received one from its left; after N-1 steps each rank's complete "
            f"chunk equals dist.all_reduce's ({owners} on {n} ranks)")


def work_file():
    """Where the notebook writes the student's script (`%%writefile {path}`): a user folder."""
    return ranks.work_file("reduce_scatter_step.py")


def judge_launch(script, n: int, lengths, *, timeout: float, dist_timeout: float, echo: bool,
                 reference: bool = False):
    """Launch `script` on `n` ranks for `lengths`: the Verdict if not solved, else None."""
    from dltutor.allreduce.exercise_judge import judge
    ran = ranks.run_on_ranks(script, nproc=n, timeout=timeout, dist_timeout=int(dist_timeout),
                             echo=echo, env={LENGTHS_ENV: ",".join(map(str, lengths))})
    if ran.unstarted:
        return not_yet(EXERCISE, "a TODO still raises NotImplementedError: fill in the TODOs, run "
                       "the %%writefile cell, then this check", reference=reference)
    if not ran.of("start"):
        return wrong(EXERCISE, f"the script failed before any step ran; fix it and run this cell "
                     f"again.\n{ran.failure}" if ran.failure else "the script ended without "
                     "running a step: keep `run(reduce_scatter_step)` at its end",
                     reference=reference)
    judged = judge(ran.metrics, n, lengths, failure=ran.failure or "", timeout=dist_timeout)
    if judged.problems:
        make = wrong if judged.started else not_yet
        return make(EXERCISE, *judged.problems, reference=reference)
    return None


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 120.0,
          seed: int | None = None, dist_timeout: float = DIST_TIMEOUT) -> bool:
    """Launch `script` on 3, then 4 gloo ranks, on vector lengths picked fresh (`seed`), and show
    "passed: ...", "not yet: ..." or "wrong: ..." (never raises; a hang ends after
    `dist_timeout` s)."""
    if solution:
        script = course.lab("05_allreduce/solutions/reduce_scatter_step.py")
    script = script if script is not None else work_file()
    if ranks.missing(script):
        return not_yet(EXERCISE, ranks.missing(script), reference=solution).show()
    rng = random.Random(seed if seed is not None else secrets.randbits(32))
    launches = [(n, pick_lengths(n, rng)) for n in WORLD_SIZES]
    for n, lengths in launches:
        verdict = judge_launch(script, n, lengths, timeout=timeout, dist_timeout=dist_timeout,
                               echo=echo, reference=solution)
        if verdict is not None:
            return verdict.show()
    return solved(EXERCISE, solved_text(launches), reference=solution).show()
