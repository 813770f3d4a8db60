"""Solution (notebook 08, the diagnosis exercise): read the mystery run the way the sections did.

    run = exercise_diagnose.mystery(TOKEN)      # what the student sees: run.steps(), run.caught,
    answer = diagnose_answer.answer(run)        # run.failure, run.blamed -> {"rank": r, "cause": c}

1. Did a rank raise "Timed out"? Then the job hung: the rank that logged no loss at a step and
   went on (its row has no `logged` value) skipped the collective the others waited in.
2. Did the launcher blame one rank that raised nothing itself? It was killed.
3. Is a loss NaN or inf? The rank and step of the first one is where it began.
4. Do the parameter checksums differ? The rank whose update_error is not ~0 changed its weights
   outside the synchronised update.
5. Else compare compute times: the rank that computes far longer is the straggler.
"""
from __future__ import annotations

import math


def answer(run) -> dict:
    steps = run.steps()
    if any("Timed out" in error for _, error in run.caught.values()):
        rank = next(s["rank"] for s in steps if s.get("logged") is None)
        return {"rank": rank, "cause": "skipped collective"}
    if run.failure and len(run.blamed) == 1 and run.blamed[0] not in run.caught:
        return {"rank": run.blamed[0], "cause": "killed"}
    bad = [s for s in steps if not math.isfinite(s["loss"])]
    if bad:
        first = min(bad, key=lambda s: (s["step"], s["rank"]))
        return {"rank": first["rank"], "cause": "nan"}
    drift = [s for s in steps if (s.get("update_error") or 0) > 1e-5]
    if drift:
        return {"rank": min(drift, key=lambda s: s["step"])["rank"], "cause": "divergence"}
    ranks = sorted({s["rank"] for s in steps})
    compute = {r: sum(s["compute_s"] for s in steps if s["rank"] == r) for r in ranks}
    return {"rank": max(compute, key=compute.get), "cause": "straggler"}
