# expect: wrong
# names: does not show rank 0 as a straggler
# why: takes the rank with the longest backward for the slow one; that is the rank waiting for it in the all-reduce
import math


def answer(run):
    steps = run.steps()
    if any("Timed out" in error for _, error in run.caught.values()):
        return {"rank": next(s["rank"] for s in steps if s["logged"] is None),
                "cause": "skipped collective"}
    if run.failure and len(run.blamed) == 1 and run.blamed[0] not in run.caught:
        return {"rank": run.blamed[0], "cause": "killed"}
    bad = [s for s in steps if not math.isfinite(s["loss"])]
    if bad:
        return {"rank": min(bad, key=lambda s: (s["step"], s["rank"]))["rank"], "cause": "nan"}
    drift = [s for s in steps if (s["update_error"] or 0) > 1e-5]
    if drift:
        return {"rank": drift[0]["rank"], "cause": "divergence"}
    backward = {r: sum(s["backward_s"] for s in steps if s["rank"] == r) for r in (0, 1)}
    return {"rank": max(backward, key=backward.get), "cause": "straggler"}
