# expect: wrong
# names: does not show rank 0's weights diverging
# why: compares the checksums with != before looking at the loss: nan != nan, so a NaN looks like divergence
import math


def answer(run):
    steps = run.steps()
    if any("Timed out" in error for _, error in run.caught.values()):
        return {"rank": next(s["rank"] for s in steps if s["logged"] is None),
                "cause": "skipped collective"}
    if run.failure and len(run.blamed) == 1 and run.blamed[0] not in run.caught:
        return {"rank": run.blamed[0], "cause": "killed"}
    for s in steps:                                  # the first step whose checksums differ
        if s["param_sums"][0] != s["param_sums"][1]:
            odd = [x for x in steps if x["step"] == s["step"] and (x["update_error"] or 0) > 1e-5]
            return {"rank": odd[0]["rank"] if odd else s["rank"], "cause": "divergence"}
    bad = [s for s in steps if not math.isfinite(s["loss"])]
    if bad:
        return {"rank": bad[0]["rank"], "cause": "nan"}
    compute = {r: sum(s["compute_s"] for s in steps if s["rank"] == r) for r in (0, 1)}
    return {"rank": max(compute, key=compute.get), "cause": "straggler"}
