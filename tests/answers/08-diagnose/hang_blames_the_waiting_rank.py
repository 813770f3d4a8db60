# expect: wrong
# names: does not show rank 0 skipping a collective
# why: in a hang, blames the rank that stopped reporting first; that rank waited, the other went on
import math


def answer(run):
    steps = run.steps()
    reports = {r: sum(1 for s in steps if s["rank"] == r) for r in (0, 1)}
    if any("Timed out" in error for _, error in run.caught.values()):
        return {"rank": min(reports, key=reports.get), "cause": "skipped collective"}
    if run.failure and len(run.blamed) == 1 and run.blamed[0] not in run.caught:
        return {"rank": run.blamed[0], "cause": "killed"}
    bad = [s for s in steps if not math.isfinite(s["loss"])]
    if bad:
        return {"rank": min(bad, key=lambda s: (s["step"], s["rank"]))["rank"], "cause": "nan"}
    drift = [s for s in steps if (s["update_error"] or 0) > 1e-5]
    if drift:
        return {"rank": drift[0]["rank"], "cause": "divergence"}
    compute = {r: sum(s["compute_s"] for s in steps if s["rank"] == r) for r in (0, 1)}
    return {"rank": max(compute, key=compute.get), "cause": "straggler"}
