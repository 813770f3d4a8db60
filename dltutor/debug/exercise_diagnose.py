"""Notebook 08's diagnosis exercise: a broken run the student has not seen; name its rank and cause.

`new_token()` draws a token (user name + a random part); `mystery(token)` picks the variant from it
(a fault of VARIANTS on rank 0 or 1), runs lab 08 with the student's checks on (fingerprints,
checksums, step times) and shows what the ranks reported and raised, never the fault's name.
The student answers {"rank": r, "cause": c} with c one of CAUSES. `check(answer, run)` compares
the answer with what that run actually did: `what_happened` reads it from the run's own reports
(the course's diagnosis, the same tools as the sections), not from the variant it was given.
"""
from __future__ import annotations

import getpass
import hashlib
import secrets

from dltutor.core.tables import show_table
from dltutor.debug import diagnose
from dltutor.debug.runs import Outcome, run_fault
from dltutor.grading.verdict import not_yet, solved, wrong

EXERCISE = "08-diagnose"
CAUSES = ("skipped collective", "straggler", "divergence", "nan", "killed")
VARIANTS = {"skip": "skipped collective", "straggler": "straggler", "outside_ddp": "divergence",
            "random_op": "divergence", "nan": "nan", "kill": "killed"}
PG_TIMEOUT = 5.0
SOLUTION = "08_debugging/solutions/diagnose_answer.py"


def new_token() -> str:
    return f"{getpass.getuser()}-{secrets.token_hex(4)}"


def variant(token: str) -> tuple[str, int]:
    """(fault, rank) for this token: the same token always gives the same broken run."""
    h = int(hashlib.sha256(token.encode()).hexdigest(), 16)
    faults = sorted(VARIANTS)
    return faults[h % len(faults)], (h // len(faults)) % 2


def mystery(token: str, echo: bool = False) -> Outcome:
    """Run this token's broken job and show what a student would see; return the run."""
    fault, rank = variant(token)
    out = run_fault(fault, fault_rank=rank, fault_step=3, pg_timeout=PG_TIMEOUT, checks=True,
                    echo=echo)
    out.token = token
    cols = ["step", "rank", "loss", "logged", "compute_ms", "backward_ms", "param_sum",
            "update_error"]
    rows = [{**s, "compute_ms": 1e3 * s["compute_s"], "backward_ms": 1e3 * s["backward_s"],
             "param_sum": (s.get("param_sums") or [None] * 2)[s["rank"]]} for s in out.steps()]
    show_table(rows, cols, title=f"mystery run {token}: what each rank reported per step",
               digits={"loss": 4, "logged": 4, "compute_ms": 1, "backward_ms": 1,
                       "param_sum": 6, "update_error": 8})
    for r, (_, error) in sorted(out.caught.items()):
        print(f"rank {r} raised: {diagnose.first_line(error)[:200]}")
    print("the launcher:", diagnose.first_line(out.failure) if out.failure else "exit 0")
    return out


def what_happened(out: Outcome) -> dict:
    """The rank and cause this run shows, read from its reports and messages."""
    steps = out.steps()
    if any("Timed out" in e for _, e in out.caught.values()):
        ahead = [s["rank"] for s in steps if s.get("logged") is None]
        return {"rank": ahead[0] if ahead else None, "cause": "skipped collective"}
    if out.failure and len(out.blamed) == 1 and out.blamed[0] not in out.caught:
        return {"rank": out.blamed[0], "cause": "killed"}
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
    rank, cause = answer.get("rank"), answer.get("cause")
    if cause not in CAUSES:
        return None, None, f"'cause' must be one of {CAUSES}, not {cause!r}"
    if not isinstance(rank, int) or isinstance(rank, bool):
        return None, None, f"'rank' must be a rank number (0 or 1), not {rank!r}"
    return rank, cause, None


def check(answer, run, reference: bool = False) -> bool:
    """Compare the student's {"rank", "cause"} with what `run` (from `mystery`) actually did."""
    if answer is None:
        return not_yet(EXERCISE, "set ANSWER to {'rank': ..., 'cause': ...} after reading the "
                       "mystery run above", reference=reference).show()
    if not isinstance(run, Outcome):
        return not_yet(EXERCISE, "run the mystery cell first: the check compares your answer with "
                       "what that run did", reference=reference).show()
    rank, cause, problem = _answer(answer)
    if problem:
        return wrong(EXERCISE, problem, reference=reference).show()
    truth = what_happened(run)
    if truth["cause"] is None:
        return wrong(EXERCISE, "this run showed no fault the check can name; draw a new token",
                     reference=reference).show()
    off = []
    if rank != truth["rank"]:
        off.append(f"you named rank {rank}; the run points at rank {truth['rank']}")
    if cause != truth["cause"]:
        off.append(f"you named the cause {cause!r}; the run shows {truth['cause']!r}")
    if off:
        return wrong(EXERCISE, *off, reference=reference).show()
    evidence = _evidence(run, truth)
    return solved(EXERCISE, f"rank {rank}, {cause}: {evidence}", reference=reference).show()


def _evidence(run: Outcome, truth: dict) -> str:
    steps, r = run.steps(), truth["rank"]
    if truth["cause"] == "skipped collective":
        s = next(s for s in steps if s["rank"] == r and s.get("logged") is None)
        return (f"rank {r} logged no loss at step {s['step']} and went on; every rank then "
                f"timed out after {PG_TIMEOUT:g} s")
    if truth["cause"] == "killed":
        return f"the launcher blamed rank {r}: {diagnose.first_line(run.failure)}"
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
