# expect: wrong
# names: does not show rank 0 killed
# why: blames the rank that raised an error first; after a kill that is the survivor, the killed rank raised nothing
def answer(run):
    raised = sorted(run.caught.items(), key=lambda item: item[1][0])   # by seconds after start
    if raised:
        rank, (_, error) = raised[0]
        cause = "skipped collective" if "Timed out" in error else "killed"
        return {"rank": rank, "cause": cause}
    steps = run.steps()
    compute = {}
    for s in steps:
        compute[s["rank"]] = compute.get(s["rank"], 0.0) + s["compute_s"]
    return {"rank": max(compute, key=compute.get), "cause": "straggler"}
