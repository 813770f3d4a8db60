"""Notebook 05's exercise: one reduce-scatter step of the ring, written with point-to-point.

The student writes `reduce_scatter_step(chunks, rank, world_size, step)` in a script that ends
with `run(reduce_scatter_step)`. In the kernel, `check(path)` launches that script on 3 gloo ranks;
each rank (`run`) cuts its vector into the ring's chunks (`ring.chunk_bounds`), calls the
student's function for steps 1 .. N-1 and reports its vector after every step. The check then
compares every chunk of every rank after every step with the step model, `ring.ring_steps`: the
chunk must hold exactly the sum the model says (`RingStep.held`, shown as the seed's labels).

Rank r's vector holds (i + 1) * 10**r at element i, so any sum names its contributions: the
decimal digits of value / (i + 1) count how often each rank's data was added.
Collectives (all_reduce, reduce_scatter, ...) are blocked while the student's step runs, and its
point-to-point calls are counted (`dltutor.grading.calls`): right sums computed without any data
crossing between ranks (typed in, or rebuilt from the known vectors) are not a solution.
"""
from __future__ import annotations

import re
import traceback

from dltutor.allreduce import ring
from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks
from dltutor.grading.calls import CallLog, watched
from dltutor.grading.verdict import from_problems, not_yet, wrong

EXERCISE = "05-reduce-scatter"

NPROC = 3
LENGTH = 7          # not a multiple of 3: chunks of 3, 2 and 2 elements (numpy.array_split)


# ------------------------------------------------------------------ inside the launched ranks
def rank_vector(rank: int, length: int = LENGTH):
    import torch
    return torch.arange(1, length + 1, dtype=torch.float64) * 10.0 ** rank


def run(step_fn, length: int = LENGTH) -> None:
    """Run the N-1 reduce-scatter steps of `step_fn` on this rank, reporting after each."""
    with _dist.session() as ctx:
        vec = rank_vector(ctx.rank, length).to(ctx.device)
        chunks = [vec[a:b] for a, b in ring.chunk_bounds(length, ctx.world_size)]
        after, p2p = [], []
        for step in range(1, ctx.world_size):
            log = CallLog()
            try:
                with watched(log, record=("send", "recv", "isend", "irecv"),
                             allow=("batch_isend_irecv",), namespaces=[step_fn.__globals__],
                             why="write the step with send/recv (isend/irecv, batch_isend_irecv)"):
                    step_fn(chunks, ctx.rank, ctx.world_size, step)
            except Exception as exc:
                _dist.report(event="error", step=step, error="".join(
                    traceback.format_exception_only(type(exc), exc)).strip())
                raise
            after.append(vec.cpu().tolist())
            p2p.append(len(log.calls))
        _dist.report(event="steps", after=after, p2p=p2p)


# ------------------------------------------------------------------ in the kernel
def contributions(value: float, element: int, n: int) -> list[int] | None:
    """The ranks summed in `value` at `element` (a rank twice if added twice), or None."""
    q = value / (element + 1)
    if q < 0 or abs(q - round(q)) > 1e-6:
        return None
    digits = [int(d) for d in reversed(str(int(round(q))))]
    if len(digits) > n:
        return None
    return [r for r, d in enumerate(digits) for _ in range(d)]


def _held(values: list[float], chunk: int, n: int) -> list[int] | None:
    a, b = ring.chunk_bounds(len(values), n)[chunk]
    got = [contributions(values[i], i, n) for i in range(a, b)]
    return got[0] if got and all(g == got[0] for g in got) else None


def _holder_first(ranks: list[int], holder: int) -> list[int]:
    return sorted(ranks, key=lambda k: (k != holder, k))


def judge(metrics: list[dict], n: int = NPROC, length: int = LENGTH) -> tuple[list[str], str]:
    """(problems, summary): every rank's chunks after every step against the step model."""
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        hang = any(re.search(r"timed? ?out", e["error"], re.I) for e in errors)
        return [f"rank {e['rank']} failed in step {e['step']}: {e['error']}" for e in errors] + (
            ["the ranks waited for each other until the timeout: if every rank sends before it "
             "receives, post dist.isend and dist.irecv first, then wait on both"] if hang else []
        ), ""
    reports = sorted((m for m in metrics if m.get("event") == "steps"), key=lambda m: m["rank"])
    if [m["rank"] for m in reports] != list(range(n)):
        return [f"only rank(s) {[m['rank'] for m in reports]} of {n} finished"], ""
    model = [s for s in ring.ring_steps(n, length) if s.phase == "reduce-scatter"]
    for state in model:
        bad = []
        for r in range(n):
            values = reports[r]["after"][state.phase_step - 1]
            for c in range(n):
                got = _held(values, c, n)
                if got is None or sorted(got) != sorted(state.held[r][c]):
                    seen = ("values that are no sum of the ranks' chunks" if got is None else
                            ring.label(c, _holder_first(got, r)) if got else "nothing")
                    bad.append(f"P{r}, chunk {c}: holds {seen}, the step model says "
                                 f"{state.label(r, c)}")
        if bad:
            unchanged = all(reports[r]["after"][state.phase_step - 1] ==
                            rank_vector(r, length).tolist() for r in range(n))
            head = (f"step {state.phase_step} changed nothing on any rank: fill in the TODOs"
                    if unchanged and state.phase_step == 1 else
                    f"after reduce-scatter step {state.phase_step} of {n - 1}:")
            return [head, *bad[:4]], ""
    silent = [f"P{m['rank']} in step {k + 1}" for m in reports
              for k, calls in enumerate(m.get("p2p", [1] * (n - 1))) if calls == 0]
    if silent:
        return [f"the sums are right, but no data crossed between ranks ({', '.join(silent)} "
                f"called no send/recv): each rank knows only its own vector; receive the left "
                f"neighbour's chunk with dist.irecv and send yours with dist.isend"], ""
    owners = ", ".join(f"P{r} {model[-1].label(r, ring.owner_after_reduce_scatter(r, n))}"
                       for r in range(n))
    return [], (f"all {n - 1} steps match the step model on {n} ranks; complete chunks: {owners}")


def work_file():
    """Where the notebook writes the student's script (`%%writefile {path}`): a user folder."""
    return ranks.work_file("reduce_scatter_step.py")


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 180.0) -> bool:
    """Launch `script` on 3 gloo ranks and show "passed: ...", "not yet: ..." or "wrong: ..."
    (never raises for a wrong or crashing step; a hang ends at the ranks' 30 s timeout)."""
    if solution:
        script = course.lab("05_allreduce/solutions/reduce_scatter_step.py")
    script = script if script is not None else work_file()
    if ranks.missing(script):
        return not_yet(EXERCISE, ranks.missing(script), reference=solution).show()
    # 3 ranks may share fewer cores: tiny messages, so that is fine here
    ran = ranks.run_on_ranks(script, nproc=NPROC, timeout=timeout, echo=echo)
    if ran.failure and not ran.of("error"):
        make = not_yet if ran.unstarted else wrong
        return make(EXERCISE, f"the script failed; fix it and run this cell again.\n{ran.failure}",
                    reference=solution).show()
    problems, summary = judge(ran.metrics)
    todo = [e for e in ran.of("error") if "NotImplementedError" in e["error"]]
    started = not (todo or (problems and problems[0].startswith("step 1 changed nothing")))
    return from_problems(EXERCISE, problems, summary + ".", started=started,
                         reference=solution).show()
