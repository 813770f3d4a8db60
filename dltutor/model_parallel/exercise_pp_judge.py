"""The kernel's side of the `06-pipeline` check: what crossed, whether the stages overlap, the
losses (see `exercise_pp` for what the ranks record).

`judge_against(metrics, ref)` reads each rank's record (its sends, receives, stage runs and irecv
completions, in program order) against `ref` (the model on one process, `exercise_pp.reference`):

  - stage 0 ran once per micro-batch, on the micro-batch's rows, in order; never on the whole
    batch (that runs all of stage 0's work before stage 1 can start);
  - each activation was sent before stage 0 started the next micro-batch (the overlap: stage 1
    works on micro-batch k while stage 0 computes k+1);
  - the k-th message is micro-batch k's stage-0 activation (its shape, and its sum against the
    one-process activations);
  - rank 1 ran stage 1 on micro-batch k once micro-batch k had arrived and before micro-batch
    k+1 was received (blocking recv) or waited on (irecv): not after receiving them all;
  - the losses: each micro-batch's, in order, and their mean (the whole batch's loss).
"""
from __future__ import annotations

from dltutor.grading.ranks import in_time_order
from dltutor.launch.results import lost_peer

SENDS = ("send", "isend")
TOL = 1e-6                   # the losses, float64 against float64


def _which(total, sums: list[float]) -> int | None:
    if total is None:
        return None
    hits = [k for k, s in enumerate(sums) if abs(total - s) <= 1e-9 * max(1.0, abs(s))]
    return hits[0] if hits else None


def _whole_batch(runs, sends, d) -> list[str]:
    batch, width, rows, m = d["batch"], d["width"], d["rows"], d["m"]
    if len(sends) == 1 and sends[0].get("shape") == [batch, width]:
        return [f"rank 0 ran stage 0 on the whole batch of {batch} and sent it in one message "
                f"({batch} x {width}): cut it into m = {m} micro-batches of {rows} and send each "
                "as soon as stage 0 has it; that is what lets the stages overlap"]
    return [f"rank 0 ran stage 0 once on the whole batch of {batch} rows, then sent "
            f"{len(sends)} piece(s) of its output: nothing crossed until stage 0 had done all the "
            f"work, so the stages never overlapped: run stage 0 on each micro-batch of {rows} "
            "and send its activation before starting the next"]


def _overlap0(calls: list) -> str | None:
    """Stage 0 must send micro-batch k-1's activation before it starts micro-batch k."""
    sent, run = 0, 0
    for c in calls:
        if c["name"] in SENDS:
            sent += 1
        elif c["name"] == "stage":
            if run and sent < run:
                return (f"rank 0 started stage 0 on micro-batch {run} with {sent} of its "
                        f"activations sent (micro-batch {run - 1}'s not yet): stage 1 has "
                        "nothing to work on while stage 0 computes; send each activation as "
                        "soon as stage 0 has it, before starting the next micro-batch (that is "
                        "what lets the stages overlap)")
            run += 1
    return None


def stage0_problems(calls: list, ref: dict) -> list[str]:
    d = ref["dims"]
    m, rows, width = d["m"], d["rows"], d["width"]
    runs = [c for c in calls if c["name"] == "stage"]
    sends = [c for c in calls if c["name"] in SENDS]
    if not sends:
        return ["nothing crossed: rank 0 made no dist.send/isend, so rank 1 cannot have "
                "computed from rank 0's activations (each rank holds only its own stage)"]
    if not runs:
        return ["rank 0 never ran its stage: call stage(micro_batch) on each micro-batch"]
    if any(c["rows"] == d["batch"] for c in runs):
        return _whole_batch(runs, sends, d)
    if len(runs) != m or any(c["rows"] != rows for c in runs):
        return [f"rank 0 ran stage 0 {len(runs)} time(s), on {[c['rows'] for c in runs]} rows, "
                f"and sent {len(sends)} activation(s); GPipe runs it once per micro-batch, m = "
                f"{m} times on {rows} rows (data.chunk(m)), and sends each activation"]
    out = []
    order = [_which(c.get("sum"), ref["input_sums"]) for c in runs[:m]]
    wrong = [(k, j) for k, j in enumerate(order) if j is not None and j != k]
    if wrong:
        out.append(f"rank 0's run {wrong[0][0]} of stage 0 was on micro-batch {wrong[0][1]}: "
                   f"take the micro-batches in order 0..{m - 1}")
    out += [p for p in [_overlap0(calls)] if p]
    if len(sends) != m:
        out.append(f"rank 0 made {len(sends)} send(s), {[s.get('shape') for s in sends]}; GPipe "
                   f"sends one activation of {rows} x {width} per micro-batch, m = {m}")
    for k, s in enumerate(sends[:m]):
        got = _which(s.get("sum"), ref["sums"])
        if s.get("shape") != [rows, width]:
            out.append(f"send {k} of rank 0 was {s.get('shape')}, a micro-batch's activation "
                       f"is {rows} x {width}")
        elif got is None:
            out.append(f"send {k} of rank 0 carried values that are no micro-batch's stage-0 "
                       "activations: send stage(micro_batch), after the stage ran")
        elif got != k:
            out.append(f"send {k} of rank 0 carried micro-batch {got}'s activations: send the "
                       f"micro-batches in order 0..{m - 1}, as rank 1 pairs them with its "
                       "targets in that order")
    return out


def stage1_problems(calls: list, ref: dict, sends: int) -> list[str]:
    """Rank 1 runs micro-batch k once k has arrived, before it receives (or waits on) k+1."""
    d = ref["dims"]
    m, rows, width = d["m"], d["rows"], d["width"]
    recvs = [c for c in calls if c["name"] in ("recv", "irecv")]
    if len(recvs) != sends:
        return [f"rank 1 made {len(recvs)} receive(s) for rank 0's {sends} send(s)"]
    if len(recvs) != m or any(c.get("shape") not in ([rows, width], [rows * width])
                              for c in recvs):
        return []           # the messages are wrong: rank 0's problems say how
    runs = [c for c in calls if c["name"] == "stage"]
    if len(runs) != m or any(c["rows"] != rows for c in runs):
        return [f"rank 1 ran stage 1 {len(runs)} time(s), on {[c['rows'] for c in runs]} rows; "
                f"it runs once per micro-batch, on each of the m = {m} as it arrives"]
    received, waited, run = 0, set(), 0
    for c in calls:
        if c["name"] == "recv":
            received += 1
        elif c["name"] == "wait":
            waited.add(c["of"])
        elif c["name"] == "stage":
            done = received + len(waited)
            if done > run + 1:
                return [f"rank 1 had received {done} micro-batches before it ran stage 1 on "
                        f"micro-batch {run}: stage 1 waited for stage 0 to finish; run each "
                        "micro-batch as soon as it has arrived, then receive the next (so stage 1 "
                        "works while stage 0 computes)"]
            if done < run + 1:
                return [f"rank 1 ran stage 1 on micro-batch {run} before its receive had "
                        "completed: wait on the irecv's request before using the buffer"]
            run += 1
    return []


def loss_problems(report: dict, ref: dict) -> list[str]:
    m = ref["dims"]["m"]
    losses = report.get("losses")
    if not losses or len(losses) != m or any(v is None for v in losses):
        what = (f"{len(losses)} loss(es)" if losses and None not in losses
                else report.get("returned") or "nothing")
        return [f"rank 1 returned {what}: return the list of the m = {m} micro-batch losses "
                "(numbers), in micro-batch order"]
    want = ref["losses"]
    off = [k for k in range(m) if abs(losses[k] - want[k]) > TOL]
    if off and all(abs(a - b) <= TOL for a, b in zip(sorted(losses), sorted(want))):
        return [f"rank 1 returned the right losses in the wrong order (micro-batch {off[0]}'s "
                f"place holds another's): return them in micro-batch order 0..{m - 1}"]
    out = [f"rank 1, loss of micro-batch {k}: {losses[k]:.6g}, the one-process model gives "
           f"{want[k]:.6g} (|difference| {abs(losses[k] - want[k]):.3g})" for k in off]
    mean = sum(losses) / m
    if abs(mean - ref["loss"]) > TOL:
        out.append(f"rank 1, mean loss {mean:.6g} vs the one-process loss on the whole batch "
                   f"{ref['loss']:.6g} (|difference| {abs(mean - ref['loss']):.3g})")
    return out


def error_problems(errors: list[dict]) -> list[str]:
    """The first error in time (the cause) first, then what it caused on the other rank."""
    errors = in_time_order(errors)
    out = []
    for i, e in enumerate(errors):
        text = e["error"]
        out.append(f"rank {e['rank']} failed: {text}" + (
            " (a consequence: it waited for the rank above)" if i and lost_peer(text) else ""))
    if lost_peer(errors[0]["error"]):
        out.append("a rank waited until the timeout: every recv needs a matching send of the "
                   "same shape on the other rank")
    return out


def judge_against(metrics: list[dict], ref: dict) -> tuple[list[str], str]:
    """(problems, summary): what crossed, the overlap, the losses, against one process."""
    d = ref["dims"]
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return error_problems(errors), ""
    reports = {m["rank"]: m for m in metrics if m.get("event") == "gpipe"}
    if sorted(reports) != [0, 1]:
        return [f"rank(s) {sorted(reports)} of 2 reported through run(gpipe_forward): keep the "
                "last line of the script"], ""
    sends = [c for c in reports[0]["calls"] if c["name"] in SENDS]
    problems = stage0_problems(reports[0]["calls"], ref)
    problems += stage1_problems(reports[1]["calls"], ref, len(sends))
    problems += loss_problems(reports[1], ref)
    mean = sum(v for v in reports[1]["losses"] or [] if v is not None) / d["m"]
    return problems, (f"{d['m']} micro-batches of {d['rows']} crossed from stage 0 to stage 1 in "
                      f"order ({len(sends)} sends of {d['rows']} x {d['width']}), each sent "
                      "before stage 0 started the next and run by stage 1 as soon as it had "
                      f"arrived; mean loss {mean:.6f} = the one-process loss on the whole batch "
                      f"(|difference| {abs(mean - ref['loss']):.1e})")
