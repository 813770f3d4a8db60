"""Notebook 08's diagnosis exercise: a broken run the student has not seen; name its rank and cause.

`new_token()` draws a token (user name + a random part); `mystery(token)` draws a broken run at
random (a fault of the list below, on rank 0 or 1), runs lab 08 with the student's checks on
(fingerprints, checksums, step times), deletes its logs (they name the fault) and returns a
`Mystery`: what the ranks reported per step, what they raised, which ranks the launcher blamed;
nothing else. The fault drawn is not kept anywhere: the check reads the truth from the run's own
evidence (the course's diagnosis, the same tools as the sections), so no token, repr or attribute
holds the answer. The student answers {"rank": r, "cause": c} with c one of CAUSES.

A wrong answer is told which claim the run does not show and what that claim would look like in
the table, never the true rank or cause. Each run allows MAX_WRONG wrong answers; after them the
check asks for a new token (a new run drawn at random), so guessing through the combinations does
not pay, and the instructor's report counts every attempt.
"""
from __future__ import annotations

import getpass
import secrets
import shutil

from dltutor.core.tables import show_table
from dltutor.debug import diagnose
from dltutor.debug.runs import run_fault
from dltutor.grading import numbers
from dltutor.grading.verdict import not_yet, solved, wrong

EXERCISE = "08-diagnose"
CAUSES = ("skipped collective", "straggler", "divergence", "nan", "killed")
_FAULTS = {"skip": "skipped collective", "straggler": "straggler", "outside_ddp": "divergence",
           "random_op": "divergence", "nan": "nan", "kill": "killed"}
NPROC, PG_TIMEOUT, MAX_WRONG = 2, 5.0, 3
SOLUTION = "08_debugging/solutions/diagnose_answer.py"
_STEP_KEYS = ("step", "epoch", "rank", "loss", "logged", "compute_s", "backward_s", "step_s",
              "grads_finite", "params_finite", "param_sums", "buffer_sums", "update_error")
_CLAIM = {"skipped collective": "rank {r} skipping a collective", "straggler": "rank {r} as a "
          "straggler", "divergence": "rank {r}'s weights diverging", "nan": "a NaN/inf starting "
          "on rank {r}", "killed": "rank {r} killed"}
_WOULD = {
    "skipped collective": "rank {r} would log no loss (`logged` empty) at a step and go on, and "
                          "the ranks would then raise 'Timed out'",
    "straggler": "rank {r}'s compute_ms would stay far above the other rank's, step after step, "
                 "with no error raised",
    "divergence": "rank {r}'s update_error would rise above ~0 and the ranks' param_sum would "
                  "differ from that step on",
    "nan": "rank {r}'s loss would be non-finite (nan or inf) first: no other rank's before it",
    "killed": "the launcher would blame rank {r}, and rank {r} would have raised nothing itself"}
_RUNS: dict[str, dict] = {}     # token -> {"run": the Mystery handed out, "evidence": its copy,
#                                          "wrong": wrong answers so far}


class Mystery:
    """A mystery run as the student sees it, and nothing more: `steps()` (one row per step and
    rank), `caught` ({rank: (seconds after the start, the error it raised)}), `failure` (what the
    launcher said, or None) and `blamed` (the ranks the launcher blamed)."""

    __slots__ = ("token", "_steps", "_caught", "failure", "blamed")

    def __init__(self, token: str, steps, caught, failure, blamed):
        self.token, self.failure, self.blamed = token, failure, tuple(blamed)
        self._steps = tuple(dict(s) for s in steps)
        self._caught = dict(caught)

    def steps(self) -> list[dict]:
        return [dict(s) for s in self._steps]

    @property
    def caught(self) -> dict:
        return dict(self._caught)

    def copy(self) -> "Mystery":
        return Mystery(self.token, self._steps, self._caught, self.failure, self.blamed)

    def __repr__(self) -> str:
        return f"<mystery run {self.token}: {len(self._steps)} step reports>"


def new_token() -> str:
    return f"{getpass.getuser()}-{secrets.token_hex(4)}"


def _from_outcome(out, token: str) -> Mystery:
    """The student's view of a run of lab 08: step rows with the checks' columns, the errors, the
    launcher's blame; no fault event, no command line, no log path."""
    starts = [m["t"] for m in out.metrics if m.get("event") == "start" and "t" in m]
    t0 = min(starts) if starts else 0.0
    steps = [{k: s.get(k) for k in _STEP_KEYS} for s in out.steps()]
    caught = {m["rank"]: (m["t"] - t0, m["error"]) for m in out.of("caught")}
    failure = (f"rank {', '.join(map(str, out.blamed))} failed; the launcher stopped the job"
               if out.failure else None)
    return Mystery(token, steps, caught, failure, out.blamed)


def _register(run: Mystery) -> Mystery:
    _RUNS[run.token] = {"run": run, "evidence": run.copy(), "wrong": 0}
    return run


def _run_variant(fault: str, rank: int, token: str | None = None, echo: bool = False) -> Mystery:
    """Run lab 08 with `fault` on `rank`, keep the student's view of it, delete its logs."""
    out = run_fault(fault, nproc=NPROC, fault_rank=rank, fault_step=3, pg_timeout=PG_TIMEOUT,
                    checks=True, echo=echo)
    if out.log_dir is not None:
        shutil.rmtree(out.log_dir, ignore_errors=True)
    return _register(_from_outcome(out, token or new_token()))


def show(run: Mystery) -> None:
    """What each rank reported per step, what the ranks raised, what the launcher said."""
    cols = ["step", "rank", "loss", "logged", "compute_ms", "backward_ms", "param_sum",
            "update_error"]
    rows = [{**s, "compute_ms": 1e3 * s["compute_s"], "backward_ms": 1e3 * s["backward_s"],
             "param_sum": (s.get("param_sums") or [None] * NPROC)[s["rank"]]} for s in run.steps()]
    show_table(rows, cols, title=f"mystery run {run.token}: what each rank reported per step",
               digits={"loss": 4, "logged": 4, "compute_ms": 1, "backward_ms": 1,
                       "param_sum": 6, "update_error": 8})
    for r, (after, error) in sorted(run.caught.items()):
        print(f"rank {r} raised, {after:.1f} s after the start: {diagnose.first_line(error)[:200]}")
    print("the launcher:", run.failure or "exit 0")


def mystery(token: str, echo: bool = False) -> Mystery:
    """This token's broken run (drawn at random and run the first time, shown again after),
    shown as a student would see it."""
    if token not in _RUNS:
        fault, rank = secrets.choice([(f, r) for f in sorted(_FAULTS) for r in range(NPROC)])
        _run_variant(fault, rank, token, echo=echo)
    run = _RUNS[token]["run"]
    show(run)
    return run


def _what_happened(run: Mystery) -> dict:
    """The rank and cause this run shows, read from its reports and messages."""
    steps, caught = run.steps(), run.caught
    if any("Timed out" in e for _, e in caught.values()):
        ahead = [s["rank"] for s in steps if s.get("logged") is None]
        return {"rank": ahead[0] if ahead else None, "cause": "skipped collective"}
    if run.failure and len(run.blamed) == 1 and run.blamed[0] not in caught:
        return {"rank": run.blamed[0], "cause": "killed"}
    nf = diagnose.first_nonfinite(steps)
    if nf["step"] is not None:
        return {"rank": nf["rank"], "cause": "nan"}
    dv = diagnose.divergence(steps)
    if dv["ranks"]:
        return {"rank": dv["ranks"][0], "cause": "divergence"}
    st = diagnose.straggler(steps)
    rows = {r["rank"]: r["compute_ms"] for r in st["rows"]}
    slow = st["slow_rank"]
    if slow is not None and all(rows[slow] > 2 * v for k, v in rows.items() if k != slow):
        return {"rank": slow, "cause": "straggler"}
    return {"rank": None, "cause": None}


def _answer(answer) -> tuple[int | None, str | None, str | None]:
    if not isinstance(answer, dict):
        return None, None, "ANSWER must be a dict like {'rank': 1, 'cause': 'straggler'}"
    rank, cause = numbers.as_int(answer.get("rank")), answer.get("cause")
    cause = cause.strip().lower() if isinstance(cause, str) else cause
    if cause not in CAUSES:
        return None, None, f"'cause' must be one of {CAUSES}, not {answer.get('cause')!r}"
    if rank not in range(NPROC):
        return None, None, (f"'rank' must be a whole number, 0 or 1 (the run had {NPROC} ranks), "
                            f"not {numbers.kind(answer.get('rank'))}")
    return rank, cause, None


def check(answer, run, reference: bool = False) -> bool:
    """Compare the student's {"rank", "cause"} with what `run` (from `mystery`) actually did."""
    if answer is None:
        return not_yet(EXERCISE, "set ANSWER to {'rank': ..., 'cause': ...} after reading the "
                       "mystery run above", reference=reference).show()
    entry = _RUNS.get(getattr(run, "token", None)) if isinstance(run, Mystery) else None
    if entry is None or entry["run"] is not run:
        return not_yet(EXERCISE, "run the mystery cell first and pass its run: the check compares "
                       "your answer with what that run did", reference=reference).show()
    rank, cause, problem = _answer(answer)
    if problem:
        return wrong(EXERCISE, problem, reference=reference).show()
    truth = _what_happened(entry["evidence"])
    if truth["cause"] is None:
        return not_yet(EXERCISE, "this run showed no fault clearly enough to grade (a busy machine "
                       "can hide a slow rank): draw a new token and run the mystery cell again",
                       reference=reference).show()
    if not reference and entry["wrong"] >= MAX_WRONG:
        return wrong(EXERCISE, f"no tries left for this run ({MAX_WRONG} wrong answers): draw a "
                     "new token (the token cell), run the mystery cell and diagnose that run",
                     reference=reference).show()
    if (rank, cause) == (truth["rank"], truth["cause"]):
        return solved(EXERCISE, f"rank {rank}, {cause}: {_evidence(entry['evidence'], truth)}",
                      reference=reference).show()
    if not reference:
        entry["wrong"] += 1
    left = MAX_WRONG - entry["wrong"]
    tries = (f"{left} of {MAX_WRONG} tries left for this run" if left else
             "no tries left for this run: draw a new token and diagnose that run")
    return wrong(EXERCISE, f"this run does not show {_CLAIM[cause].format(r=rank)}",
                 f"if it did, {_WOULD[cause].format(r=rank)}; compare that with the run above",
                 tries, reference=reference).show()


def _evidence(run: Mystery, truth: dict) -> str:
    steps, r = run.steps(), truth["rank"]
    if truth["cause"] == "skipped collective":
        s = next(s for s in steps if s["rank"] == r and s.get("logged") is None)
        return (f"rank {r} logged no loss at step {s['step']} and went on; the ranks then timed "
                f"out after {PG_TIMEOUT:g} s")
    if truth["cause"] == "killed":
        return f"the launcher blamed rank {r}, which raised nothing itself"
    if truth["cause"] == "nan":
        nf = diagnose.first_nonfinite(steps)
        return f"its loss was first non-finite at step {nf['step']}, then every rank's parameters"
    if truth["cause"] == "divergence":
        dv = diagnose.divergence(steps)
        return (f"parameter checksums differ from step {dv['step']}; rank {r}'s update was not "
                "the synchronised one")
    st = {x["rank"]: x for x in diagnose.straggler(steps)["rows"]}
    return (f"it computed {st[r]['compute_ms']:.0f} ms per step; "
            + ", ".join(f"rank {k}: {v['compute_ms']:.0f} ms" for k, v in st.items() if k != r))
