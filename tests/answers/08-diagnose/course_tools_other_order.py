# expect: solved
# why: the course's diagnose helpers, the launcher's blame first, then the hang, then the silent faults
from dltutor.debug import diagnose


def answer(run):
    steps, caught = run.steps(), run.caught
    if run.failure and len(run.blamed) == 1 and run.blamed[0] not in caught:
        return {"rank": run.blamed[0], "cause": "killed"}
    if any(diagnose.TIMEOUT.search(error) for _, error in caught.values()):
        went_on = [s for s in steps if s["logged"] is None]
        return {"rank": went_on[0]["rank"], "cause": "skipped collective"}
    first = diagnose.first_nonfinite(steps)
    if first["step"] is not None:
        return {"rank": first["rank"], "cause": "nan"}
    drift = diagnose.divergence(steps)
    if drift["ranks"]:
        return {"rank": drift["ranks"][0], "cause": "divergence"}
    return {"rank": diagnose.straggler(steps)["slow_rank"], "cause": "straggler"}
