# expect: solved
# why: one summary per rank (numpy): reports, first non-finite step, worst update error, median compute
import numpy as np


def answer(run):
    steps = run.steps()
    ranks = np.array(sorted({s["rank"] for s in steps}))
    col = lambda r, k: np.array([s[k] if s[k] is not None else np.nan  # noqa: E731
                                 for s in steps if s["rank"] == r], dtype=float)
    if any("Timed out" in e for _, e in run.caught.values()):
        went_on = [r for r in ranks if np.isnan(col(r, "logged")).any()]
        return {"rank": went_on[0], "cause": "skipped collective"}        # a numpy int
    if run.failure and set(run.blamed) - set(run.caught):
        return {"rank": np.int64(run.blamed[0]), "cause": "killed"}
    first_bad = {r: np.argmax(~np.isfinite(col(r, "loss"))) if (~np.isfinite(col(r, "loss"))).any()
                 else np.inf for r in ranks}
    if min(first_bad.values()) < np.inf:
        return {"rank": min(first_bad, key=first_bad.get), "cause": "nan"}
    worst = {r: np.nanmax(col(r, "update_error")) for r in ranks}
    if max(worst.values()) > 1e-4:
        return {"rank": max(worst, key=worst.get), "cause": "divergence"}
    median = {r: np.median(col(r, "compute_s")) for r in ranks}
    return {"rank": max(median, key=median.get), "cause": "straggler"}
