"""Notebook 08's repair exercise: a script that hangs, to be made to finish with the right result.

The script runs several cases (`cases()`); in each, every rank holds its own values
(`my_values(rank, case)`), a different number on each rank, and must report the sum of all values
of all ranks (`report_total(total, case)`). A rank's values are drawn inside that rank's process
from the operating system's randomness when it first asks for them: no other rank can compute or
read them, so a right total on every rank proves a collective carried them. The counts come from a
seed the check passes (DLTUTOR_EXERCISE_SEED, fresh for every check) and cover the edges: either
rank holding more, a rank holding none, and a case of hundreds to thousands of values (more than
any length fixed in advance). At the end of each case every rank meets the others on a group of
its own (`cases()` does it), so a rank that called fewer collectives waits there and the case is
named. As handed out (`HANDOUT`) it all-reduces one value at a time and hangs; the check
recognises that text and says so without running it ("not run": a hang costs the timeout).

The check (`check`) runs the student's script on 2 gloo ranks with a process-group timeout of
DIST_TIMEOUT seconds; the verdict (`dltutor.debug.exercise_hang_judge`) names the first case that
failed, its counts and the mistake.
"""
from __future__ import annotations

import os
import random
import secrets
from datetime import timedelta
from pathlib import Path

from dltutor.core import course
from dltutor.grading import numbers, ranks
from dltutor.grading.verdict import from_problems, not_yet, wrong

EXERCISE = "08-fix-hang"
NPROC, DIST_TIMEOUT = 2, 8
SEED_ENV = "DLTUTOR_EXERCISE_SEED"
HANDOUT = "08_debugging/exercise/uneven_sum.py"
SOLUTION = "08_debugging/solutions/uneven_sum.py"
_drawn: dict[int, list[float]] = {}          # inside a rank: this rank's values, per case


def case_counts(seed: int, world_size: int = NPROC) -> list[tuple[int, ...]]:
    """How many values each rank holds in each case: rank 1 more, rank 0 more, a rank with none,
    then hundreds to thousands (more than a length chosen in advance)."""
    rng = random.Random(seed)
    a, b, z, big = rng.randint(2, 6), rng.randint(6, 9), rng.randint(1, 6), rng.randint(600, 1500)
    pairs = [(a, a + rng.randint(2, 4)), (b, b - rng.randint(2, 4)),
             (0, z) if rng.random() < 0.5 else (z, 0)]
    last = (big, big + rng.randint(300, 1500))
    pairs.append(last if rng.random() < 0.5 else last[::-1])
    return [tuple(p[r] if r < 2 else rng.randint(0, max(p)) for r in range(world_size))
            for p in pairs]


# ------------------------------------------------------------------ inside the launched ranks
def _seed() -> int:
    return int(os.environ.get(SEED_ENV, "0"))


def _rank_world() -> tuple[int, int]:
    from dltutor.core import dist
    ctx = dist.context()
    if ctx is not None:
        return ctx.rank, ctx.world_size
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def cases():
    """The cases of this check, in order (0, 1, ...). After each, every rank waits for the others
    on a group of its own: a rank still inside a collective the others never called is found
    there, within the group's timeout, and the case is named."""
    from dltutor.core import dist
    rank, world = _rank_world()
    fence = _fence_group()
    for case in range(len(case_counts(_seed(), world))):
        dist.report(event="case", case=case)
        yield case
        _meet(fence, rank, case)


def _fence_group():
    import torch.distributed as tdist
    if not tdist.is_available() or not tdist.is_initialized():
        return None
    seconds = float(os.environ.get("DLTUTOR_DIST_TIMEOUT", DIST_TIMEOUT))
    return tdist.new_group(backend="gloo", timeout=timedelta(seconds=seconds))


def _meet(fence, rank: int, case: int) -> None:
    import torch.distributed as tdist

    from dltutor.core import dist
    if fence is None:
        return
    try:
        tdist.barrier(group=fence)
    except RuntimeError as exc:
        dist.report(event="waited", case=case, error=str(exc)[:300])
        raise RuntimeError(f"rank {rank} finished case {case} and waited at its end for the "
                           "other ranks: one was still inside a collective this rank never "
                           "called") from exc


def my_values(rank: int, case: int) -> list[float]:
    """This rank's values in `case` (a list of floats; the count differs between ranks and cases).
    Only this rank can read them: they are drawn in its own process, from the system's
    randomness."""
    own, world = _rank_world()
    if numbers.as_int(rank) != own:
        raise ValueError(f"rank {own} asked for rank {rank}'s values: a rank can read only its own "
                         f"(rank {rank}'s exist only in its own process); no value crosses between "
                         "ranks unless a collective carries it")
    counts = case_counts(_seed(), world)
    if numbers.as_int(case) not in range(len(counts)):
        raise ValueError(f"case must be one of the cases of ex.cases() (0..{len(counts) - 1}), "
                         f"not {case!r}")
    case = numbers.as_int(case)
    if case not in _drawn:
        draw = secrets.SystemRandom()
        _drawn[case] = [round(draw.uniform(-5.0, 5.0), 3) for _ in range(counts[case][own])]
        from dltutor.core import dist
        dist.report(event="values", case=case, values=_drawn[case])
    return list(_drawn[case])


def report_total(total, case: int) -> None:
    """Report this rank's answer for `case`: the sum over every rank's values (one number: a
    float, a numpy scalar or a one-element tensor)."""
    from dltutor.core import dist
    value = numbers.as_float(total.detach() if hasattr(total, "detach") else total)
    if value is None:
        raise TypeError(f"report_total(total, case): total must be one number, the sum over all "
                        f"ranks, not {numbers.kind(total)}")
    dist.report(event="total", case=numbers.as_int(case), total=value)


# ------------------------------------------------------------------ in the kernel
def work_file(name: str = "uneven_sum.py") -> Path:
    return ranks.work_file(name)


def _text(path) -> str:
    return "\n".join(line.rstrip() for line in Path(path).read_text().strip().splitlines())


def untouched(script) -> bool:
    return _text(script) == _text(course.lab(HANDOUT))


def check(script=None, solution: bool = False, echo: bool = False, timeout: float = 120.0,
          seed: int | None = None, dist_timeout: float = DIST_TIMEOUT) -> bool:
    """Run `script` on 2 gloo ranks (a hang ends after `dist_timeout` s) and print the verdict."""
    from dltutor.debug import exercise_hang_judge as judge
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    absent = ranks.missing(script)
    if absent:
        return not_yet(EXERCISE, absent, reference=solution).show()
    if untouched(script):
        return not_yet(EXERCISE, "not run: this is the script as handed out, which hangs (section 1 "
                       "of notebook 08 shows what a hang looks like): change it so that every "
                       "rank finishes every case and reports the sum of all ranks' values, run the "
                       "%%writefile cell, then this check", reference=solution).show()
    seed = random.randrange(1, 10 ** 6) if seed is None else seed
    ran = ranks.run_on_ranks(script, NPROC, env={SEED_ENV: str(seed)}, timeout=timeout,
                             dist_timeout=dist_timeout, echo=echo)
    problems, summary = judge.judge(ran, case_counts(seed, NPROC), dist_timeout)
    if ran.failure and not problems:
        return wrong(EXERCISE, "every case reported the right total, but the script did not end "
                     f"cleanly: {judge.first_error(ran)}", reference=solution).show()
    return from_problems(EXERCISE, problems, summary, reference=solution).show()
