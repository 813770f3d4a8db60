"""Run the student's exercise script on real ranks and collect what the ranks reported.

    ran = run_on_ranks(script, nproc=2)      # the course launcher (dltutor.launch.run.launch)
    ran.metrics                              # every DLTUTOR_METRICS record of every rank
    ran.failure                              # None, or the launcher's message (failing rank named)
    ran.unstarted                            # a rank stopped at a TODO (NotImplementedError)
    check_script(exercise, script, judge, ...)   # the usual check: run, judge, show the verdict
    report_error(exc, step=3)                # inside a rank: what it raised, and when
    in_time_order(ran.metrics)               # those reports: causes first, first in time first
    failure_lines(ran.metrics)               # "rank 1 raised first: ...", then the consequences

When ranks fail, the verdict leads with the cause: the first error in time across ranks that is
not a rank losing its peer ("Connection reset by peer", a timeout); the errors that followed from
it come after it, each named as a consequence. "not yet" is kept for work not started: the
file missing, or the script as handed out with its TODOs still raising; a script the student
changed that still stops at a TODO, or runs and computes wrongly, is "wrong".

The ranks run on the CPU with gloo (CUDA_VISIBLE_DEVICES="") and a bounded process-group timeout
(DLTUTOR_DIST_TIMEOUT), so a script that hangs in a collective fails within `timeout` seconds with
the stuck rank named, and nothing is left running (the launcher's guarantee).
"""
from __future__ import annotations

import random
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

UNSTARTED = "NotImplementedError"      # what a skeleton's TODOs raise


@dataclass
class Ran:
    metrics: list = field(default_factory=list)
    failure: str | None = None
    logs: dict = field(default_factory=dict)

    @property
    def unstarted(self) -> bool:
        text = (self.failure or "") + "".join(_tail(p) for p in self.logs.values())
        return self.failure is not None and UNSTARTED in text

    def of(self, event: str) -> list[dict]:
        """The records with this `event`, in rank order."""
        return sorted((m for m in self.metrics if m.get("event") == event),
                      key=lambda m: m.get("rank", 0))


def report_error(exc: BaseException, **fields) -> dict:
    """Inside a launched rank: report what `exc` is (its last line) and when (`t`, epoch s)."""
    from dltutor.core import dist
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return dist.report(event="error", t=time.time(), error=text, **fields)


def in_time_order(metrics: list[dict]) -> list[dict]:
    """The ranks' "error" reports: causes before consequences (a rank that only lost its peer or
    timed out waiting for it), each group first in time first (then by rank)."""
    from dltutor.launch.results import lost_peer
    errors = [m for m in metrics if m.get("event") == "error"]
    return sorted(errors, key=lambda e: (lost_peer(str(e.get("error", ""))),
                                         e.get("t", float("inf")), e.get("rank", 0)))


def failure_lines(metrics: list[dict], width: int = 300) -> list[str]:
    """What the ranks raised, the cause first: "rank 1 raised first: ...", then "then rank 0
    raised (a consequence: it lost its peer): ..."."""
    from dltutor.launch.results import lost_peer
    out = []
    for i, e in enumerate(in_time_order(metrics)):
        text = " ".join(str(e.get("error", "")).split())[:width]
        where = f" at step {e['step']}" if e.get("step") is not None else ""
        if i == 0:
            out.append(f"rank {e.get('rank')} raised first{where}: {text}")
        else:
            why = (" (a consequence: it lost its peer or timed out waiting for it)"
                   if lost_peer(text) else "")
            out.append(f"then rank {e.get('rank')} raised{where}{why}: {text}")
    return out


def untouched(script, handout: str) -> bool:
    """The student's file is the handed-out text (white space at line ends aside)."""
    def norm(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip().splitlines())
    try:
        return norm(Path(script).read_text()) == norm(handout)
    except OSError:
        return False


def handout(notebook: str, variable: str) -> str | None:
    """The script as handed out: the notebook's `%%writefile {variable}` cell (None if absent)."""
    import json

    from dltutor.core import course
    head = f"%%writefile {{{variable}}}\n"
    try:
        nb = json.loads((course.course_root() / "notebooks" / notebook).read_text())
    except (OSError, ValueError, course.CourseNotFound):
        return None
    for cell in nb.get("cells", []):
        text = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "code" and text.startswith(head):
            return text[len(head):]
    return None


def _tail(path, n: int = 4000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def work_file(name: str) -> Path:
    """Where the notebook writes the student's script (`%%writefile {path}`): the student's own
    folder (`dltutor.core.env.user_dir()`), never the shared install or another student's."""
    from dltutor.core.env import user_folder
    return user_folder("exercises") / name


def missing(script) -> str | None:
    """The "not yet" message when the student's file is not there."""
    if script is None or not Path(script).is_file():
        return f"there is no script at {script}: run the %%writefile cell above first"
    return None


def run_on_ranks(script, nproc: int = 2, *, args=(), env=None, timeout: float = 180.0,
                 dist_timeout: int = 30, echo: bool = False, oversubscribe: bool = True) -> Ran:
    """Launch `script` on `nproc` CPU ranks; never raises for a failing or hanging script. While
    the ranks are silent the cell says which still run, what each printed last and until when
    (dltutor.launch.waiting, even with `echo=False`)."""
    from dltutor.launch.results import LaunchError
    from dltutor.launch.run import launch
    ranks_env = {"CUDA_VISIBLE_DEVICES": "", "DLTUTOR_DIST_TIMEOUT": str(dist_timeout),
                 **(env or {})}
    try:
        result = launch(script, nproc=nproc, args=list(args), env=ranks_env, threads=1,
                        timeout=timeout, echo=echo, oversubscribe=oversubscribe)
    except LaunchError as exc:
        res = exc.result
        return Ran(metrics=res.metrics if res is not None else [], failure=str(exc),
                   logs=res.logs if res is not None else {})
    return Ran(metrics=result.metrics, logs=result.logs)


def check_script(exercise: str, script, judge, *, nproc: int = 2, todo: str = "",
                 seed_env: str | None = None, reference: bool = False, echo: bool = True,
                 timeout: float = 120.0, seed: int | None = None,
                 handout: str | None = None) -> bool:
    """The usual check: run the student's `script` on `nproc` ranks, judge, show the verdict.

    `judge(metrics)` (or `judge(metrics, seed)` with `seed_env`: a fresh seed per check, passed
    to the ranks in that variable, so no answer can be typed in ahead) returns (problems,
    summary). Missing file, or a TODO still raising in the script as handed out (`handout`, its
    text; without it any TODO still raising): not yet (`todo` says what to fill in); a changed
    script that still stops at a TODO, or that crashed before the ranks reported: wrong, with
    the launcher's message (the rank that failed first named)."""
    from dltutor.grading.verdict import from_problems, not_yet, wrong
    if missing(script):
        return not_yet(exercise, missing(script), reference=reference).show()
    env = {}
    if seed_env:
        seed = random.randrange(1, 10 ** 6) if seed is None else seed
        env[seed_env] = str(seed)
    ran = run_on_ranks(script, nproc=nproc, env=env, timeout=timeout, echo=echo)
    if ran.unstarted and (handout is None or untouched(script, handout)):
        where = (f" (the ranks' output: {Path(next(iter(ran.logs.values()))).parent})"
                 if ran.logs else "")
        return not_yet(exercise, f"a TODO still raises NotImplementedError: fill in {todo}, run "
                       f"the %%writefile cell, then this check{where}", reference=reference).show()
    if ran.unstarted:
        return wrong(exercise, "your script ran, but a TODO in it still raises "
                     f"NotImplementedError: fill in {todo} too.\n{ran.failure}",
                     reference=reference).show()
    if ran.failure and not ran.of("error"):
        return wrong(exercise, f"the script failed; fix it and run this cell again.\n"
                     f"{ran.failure}", reference=reference).show()
    problems, summary = judge(ran.metrics, seed) if seed_env else judge(ran.metrics)
    summary = summary if not summary or summary.endswith(".") else summary + "."
    return from_problems(exercise, problems, summary, reference=reference).show()
