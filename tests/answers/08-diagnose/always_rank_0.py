# expect: wrong
# names: does not show rank 0 (skipping a collective|killed|as a straggler|'s weights diverging)|a NaN/inf starting on rank 0
# why: reads the cause right but always names rank 0, the rank that prints
import math


def answer(run):
    steps = run.steps()
    if any("Timed out" in error for _, error in run.caught.values()):
        cause = "skipped collective"
    elif run.failure:
        cause = "killed"
    elif any(not math.isfinite(s["loss"]) for s in steps):
        cause = "nan"
    elif any((s["update_error"] or 0) > 1e-5 for s in steps):
        cause = "divergence"
    else:
        cause = "straggler"
    return {"rank": 0, "cause": cause}
