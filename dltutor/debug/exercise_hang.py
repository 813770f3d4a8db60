"""Notebook 08's repair exercise: a script that hangs, to be made to finish with the right result.

Every rank holds a different number of values (`my_values`, drawn from a seed the check passes in
DLTUTOR_EXERCISE_SEED, fresh for every check, so no total can be typed in ahead). The script must
report, on every rank, the sum of all values of all ranks (`report_total`). As handed out
(`HANDOUT`) it all-reduces one value at a time, so the rank with more values waits in an
all-reduce the other rank never calls. The check (`check`) runs the student's script on 2 gloo
ranks with a process-group timeout of DIST_TIMEOUT seconds: a script that still hangs fails within
it, with the launcher's message, and leaves nothing running.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

from dltutor.core import course
from dltutor.grading import ranks
from dltutor.grading.verdict import from_problems, not_yet, wrong

EXERCISE = "08-fix-hang"
NPROC, DIST_TIMEOUT = 2, 8
SEED_ENV = "DLTUTOR_EXERCISE_SEED"
HANDOUT = "08_debugging/exercise/uneven_sum.py"
SOLUTION = "08_debugging/solutions/uneven_sum.py"


# ------------------------------------------------------------------ inside the launched ranks
def my_values(rank: int, world_size: int, seed: int | None = None) -> list[float]:
    """This rank's values: 3 + rank + (0..2, from the seed) of them, so no two ranks hold as many."""
    seed = int(os.environ.get(SEED_ENV, "0")) if seed is None else seed
    base = 3 + random.Random(seed).randrange(3)
    rng = random.Random(seed * 1009 + rank)
    return [round(rng.uniform(-5.0, 5.0), 3) for _ in range(base + rank)]


def report_total(total) -> None:
    """Report this rank's answer: the sum over every rank's values."""
    from dltutor.core import dist
    value = float(total.reshape(-1)[0]) if hasattr(total, "reshape") else float(total)
    dist.report(event="total", total=value)


# ------------------------------------------------------------------ in the kernel
def work_file(name: str = "uneven_sum.py") -> Path:
    return ranks.work_file(name)


def _text(path) -> str:
    return "\n".join(line.rstrip() for line in Path(path).read_text().strip().splitlines())


def untouched(script) -> bool:
    return _text(script) == _text(course.lab(HANDOUT))


def judge(metrics: list[dict], seed: int, n: int = NPROC) -> tuple[list[str], str]:
    values = {r: my_values(r, n, seed) for r in range(n)}
    want = sum(sum(v) for v in values.values())
    got = {m["rank"]: m["total"] for m in metrics if m.get("event") == "total"}
    problems = []
    for r in range(n):
        if r not in got:
            problems.append(f"rank {r} reported no total (call ex.report_total(total) on every rank)")
            continue
        if abs(got[r] - want) <= 1e-6 * max(1.0, abs(want)):
            continue
        short = min(len(v) for v in values.values())
        why = ("its own values only: all-reduce the local sum" if abs(got[r] - sum(values[r])) < 1e-6
               else f"the first {short} values of each rank only: the values beyond the shortest "
               "rank were dropped" if abs(got[r] - sum(sum(v[:short]) for v in values.values())) < 1e-6
               else "neither the total nor a part of it")
        problems.append(f"rank {r} reported {got[r]:.3f}, the sum of all {sum(map(len, values.values()))}"
                        f" values of the {n} ranks is {want:.3f}: that is {why}")
    counts = ", ".join(f"rank {r}: {len(v)}" for r, v in values.items())
    return problems, (f"both ranks finished and reported {want:.3f}, the sum over all ranks' "
                      f"values ({counts} values, seed {seed})")


def _why(failure: str) -> str:
    """The launcher's first line, and the first timeout a rank raised (a hang), if any."""
    lines = failure.splitlines()
    hung = next((ln.strip() for ln in lines if "Timed out" in ln), "")
    hung = hung.split('"error": "')[-1][:160] if hung else ""
    return lines[0] + (f" A rank waited until the group's timeout ({DIST_TIMEOUT} s): {hung}"
                       if hung else "")


def check(script=None, solution: bool = False, echo: bool = False, timeout: float = 90.0,
          seed: int | None = None) -> bool:
    """Run `script` on 2 gloo ranks (a hang ends after DIST_TIMEOUT s) and print the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    absent = ranks.missing(script)
    if absent:
        return not_yet(EXERCISE, absent, reference=solution).show()
    if untouched(script):
        return not_yet(EXERCISE, "this is the script as handed out, and it hangs: change it so "
                       "that every rank finishes and reports the sum of all ranks' values, run "
                       "the %%writefile cell, then this check", reference=solution).show()
    seed = random.randrange(1, 10 ** 6) if seed is None else seed
    ran = ranks.run_on_ranks(script, NPROC, env={SEED_ENV: str(seed)}, timeout=timeout,
                             dist_timeout=DIST_TIMEOUT, echo=echo)
    if ran.failure and not ran.of("total"):
        return wrong(EXERCISE, f"the script did not finish; fix it and run this cell again.\n"
                     f"{ran.failure}", reference=solution).show()
    problems, summary = judge(ran.metrics, seed)
    if ran.failure:
        problems.insert(0, "the script did not finish: " + _why(ran.failure))
    return from_problems(EXERCISE, problems, summary + ".", reference=solution).show()
