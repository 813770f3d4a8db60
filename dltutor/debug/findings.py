"""The sentences notebook 08 prints: what each broken run showed, from that run's numbers.

Each takes an `Outcome` (dltutor.debug.runs) or a diagnosis (dltutor.debug.diagnose) and says which
rank, which step, which message and how many seconds after the fault it came; when a run did not
show what the section is about, the sentence says that instead.
"""
from __future__ import annotations

from dltutor.debug import diagnose, stacks


def _after(out, rank) -> str:
    after, _ = out.caught.get(rank, (None, ""))
    return f"{after:.2f} s" if after is not None else "never"


def hang(out, group_timeout_s: float) -> list[str]:
    d = diagnose.hang(out)
    lines = [f"The fault struck rank {d['fault_rank']}; then nothing happened: every rank waited "
             f"in a collective until the group's timeout ({group_timeout_s:g} s) ended it; the "
             f"first rank's error came {min(r['after_s'] for r in d['rows']):.3f} s after the "
             f"fault, the last one's {max(r['after_s'] for r in d['rows']):.3f} s."
             if d["rows"] else "No rank raised an error in this run."]
    for r in d["rows"]:
        lines.append(f"rank {r['rank']} after {r['after_s']:.2f} s: {r['message']}")
    names = [r for r in d["rows"] if r["mismatch"]]
    if not names and d["rows"]:
        lines.append("None of these messages names a rank, an op or a sequence number: the "
                     "timeout only says that some peer never came.")
    if out.failure:
        lines.append(f"The course launcher blamed rank(s) {out.blamed}: "
                     f"{diagnose.first_line(out.failure)}")
    lines.append(f"Processes of this launch still running afterwards: {len(out.left_running)}.")
    return lines


def detail(out) -> list[str]:
    d = diagnose.hang(out)
    found = [r for r in d["rows"] if r["mismatch"]]
    if not found:
        return ["TORCH_DISTRIBUTED_DEBUG=DETAIL named no mismatch in this run: "
                + "; ".join(r["message"] for r in d["rows"])]
    r = min(found, key=lambda x: x["after_s"])
    a, b = r["mismatch"]["a"], r["mismatch"]["b"]
    diff = [k for k in ("seq", "op", "shape", "dtype") if a[k] != b[k]]
    return [f"{r['after_s']:.3f} s after the fault, rank {r['rank']} raised DETAIL's mismatch: "
            f"rank {a['rank']} at SequenceNumber={a['seq']} runs {a['op']} "
            f"(shape [{a['shape']}], {a['dtype']}) while rank {b['rank']} at "
            f"SequenceNumber={b['seq']} runs {b['op']} (shape [{b['shape']}], {b['dtype']}): "
            f"they differ in {', '.join(diff) or 'nothing it prints'}."]


def flight(out) -> list[str]:
    from dltutor.debug import flight as fr
    found = fr.findings(out.fr_text)
    if not found:
        return ["torch's analyzer found nothing in the dumps: " + out.fr_text[-300:]]
    lines = [f"torch's Flight Recorder analyzer: sequence number {f['seq']}, {f['op']}: "
             f"{f['kind']} {f['ranks']}" for f in found[:3]]
    last = "; ".join(f"rank {r}: last collective #{e['last_seq']} {e['op']} {e['input_sizes']}"
                     for r, e in sorted(out.fr_last.items()))
    lines.append(f"The dumps' last entries: {last}.")
    lines += behind_ahead(fr.behind_and_ahead(out.fr_last), found)
    lines.append(f"A fact of this torch, not a measurement of this run: {fr.REKEYED}.")
    return lines


def behind_ahead(pos: dict | None, found: list[dict]) -> list[str]:
    """Which rank is behind (waiting) and which ahead, and which of them the evidence blames."""
    if pos is None:
        return ["Fewer than two ranks left a dump: nothing to say about who is behind."]
    if not pos["ahead"]:
        return [f"Every rank stopped at collective #{pos['seq']}: none is behind another."]
    b, seq, op = pos["behind"], pos["seq"], pos["op"]
    ahead = "; ".join(f"rank {r} at #{pos['last'][r][0]} {pos['last'][r][1]}" for r in pos["ahead"])
    out = [f"Behind: rank(s) {b}, whose last issued collective is #{seq} {op}: they wait there. "
           f"Ahead: {ahead}."]
    states = pos.get("states") or {}
    if len(states) == 1:
        (state, n), = states.items()
        out.append(f"Every entry of the dumps is in state '{state}' ({n} of {n}, finished "
                   "collectives included): gloo's Flight Recorder records neither start nor "
                   "completion, so the state is no evidence of where a rank waits.")
    skipped = [r for r in pos["ahead"] if pos["there"][r] not in (None, op)]
    if any(pos["there"][r] is None for r in pos["ahead"]):
        out.append(f"The buffer of a rank ahead no longer holds its #{seq}: the dumps cannot say "
                   "whether it skipped that collective or the rank behind stopped before it.")
    elif skipped:
        out.append(f"As its #{seq}, rank(s) {skipped} ran "
                   f"{', '.join(str(pos['there'][r]) for r in skipped)}, not {op}: they went past "
                   f"the collective rank(s) {b} wait in without calling it. Here the rank ahead "
                   "is the culprit and the rank behind is the healthy one, waiting for it.")
    else:
        out.append(f"The ranks ahead ran {op} as their #{seq} too: the rank(s) behind, {b}, are "
                   "the ones that stopped (stuck in or before that collective).")
    named = sorted({f["seq"] for f in found
                    if f["kind"] == "missing ranks" and set(f["ranks"]) == set(b)})
    if named and skipped:
        out.append(f"The analyzer's \"missing ranks\" at {', '.join(f'#{n}' for n in named)} "
                   f"list rank(s) {b}: the ranks that are behind, not the cause.")
    return out


def stack_lines(out) -> list[str]:
    if not out.stacks:
        return ["No py-spy dump was taken in this run."]
    lines = []
    last = {}
    for s in out.steps():
        last[s["rank"]] = max(last.get(s["rank"], -1), s["step"])
    for r, text in sorted(out.stacks.items()):
        w = stacks.where(text)
        if w is None:
            lines.append(f"rank {r}: py-spy gave no frame of the lab: {text[-200:]}")
            continue
        done = (f"its last step report is step {last[r]}, so this is the step after it"
                if r in last else "it reported no step")
        lines.append(f"rank {r} waits in {w['innermost']}, called from the lab's line "
                     f"{w['lab']}: `{w['source']}` ({done}).")
    return lines


def divergence(out) -> list[str]:
    d = diagnose.divergence(out.steps())
    if d["what"] is None:
        return ["The checksums agreed on every step: nothing diverged in this run."]
    who = (f"rank(s) {d['ranks']} moved their weights by something other than the synchronised "
           f"update (first at step {d['update_step']})" if d["ranks"] else
           "every rank's parameter update was the synchronised one: the difference is in the "
           "buffers (BatchNorm's running statistics), which no gradient touches; DDP never "
           "averages them, it only copies rank 0's at each forward when forward_sync_buffers is on")
    return [f"The {d['what']} checksums first differ across ranks at step {d['step']}; {who}."]


def epochs(out) -> list[str]:
    d = diagnose.same_order(out.steps())
    if not d["epochs"]:
        return [f"Every epoch's batches differed from the previous epoch's on every rank "
                f"({d['of_epochs']} epochs)."]
    return [f"In epoch(s) {d['epochs']} rank(s) {d['ranks']} saw exactly the batches of the "
            f"epoch before: the sampler was not reshuffled (set_epoch)."]


def straggler(out, fixed=None, load=None) -> list[str]:
    """The slow rank and what it costs the others, one run each (dltutor.debug.straggler);
    `fixed`: the run without the slow rank; `load`: os.getloadavg() at the runs."""
    from dltutor.debug import straggler as st
    return st.findings(out, fixed=fixed, load=load)


def nonfinite(out, scaled=None) -> list[str]:
    d = diagnose.first_nonfinite(out.steps())
    if d["step"] is None:
        return ["No loss went NaN or inf in this run."]
    lines = [f"The first non-finite loss: rank {d['rank']} at step {d['step']} (losses non-finite "
             f"there on ranks {d['loss_nonfinite_ranks']}); after the all-reduce the gradients "
             f"were non-finite on ranks {d['grads_nonfinite_ranks']} and the parameters on "
             f"{d['params_nonfinite_ranks']}: one rank's inf reached every rank."]
    if scaled is not None:
        s = diagnose.first_nonfinite(scaled.steps())
        moves = [(a, b) for (a, b), (c, e) in zip(s["scales"], s["scales"][1:]) if e != b]
        k = diagnose.skipped_step(scaled.steps(), s["step"]) if s["step"] is not None else None
        skip = ("no parameter checksums to tell whether the step was skipped" if not k or not
                k["known"] else f"the parameter checksums of rank(s) {k['unchanged']} were exactly "
                "equal to the step before's ("
                + ", ".join(f"{a:.6f} -> {b:.6f}" for a, b in k["sums"].values())
                + "): the update was skipped" if not k["changed"] else
                f"the parameters of rank(s) {k['changed']} changed in that step: it was NOT skipped")
        lines.append(f"With loss scaling the same fault at step {s['step']}: parameters "
                     f"non-finite on {s['params_nonfinite_ranks'] or 'no rank'}; {skip}; the scale "
                     f"went {s['scales'][0][1]:g} -> {s['scales'][-1][1]:g}"
                     f" ({len(moves)} change(s)); losses finite again afterwards: "
                     f"{s['finite_again']}.")
    return lines


def killed(out, label: str) -> list[str]:
    d = diagnose.killed(out)
    if d["launcher_after_s"] is None:
        raise RuntimeError(f"{label}: the run ended before any rank reached the kill, so it shows "
                           f"nothing about a killed rank: {d['message'] or 'no error given'}. "
                           f"Read {out.log_dir}/launcher.log, fix what it says, and run the cell again.")
    from dltutor.debug.hidden import short
    surv = "; ".join(f"rank {r} after {a:.2f} s: {short(m)}" for r, (a, m) in d["survivors"].items())
    stop = d.get("stop_after_s")
    acted = (f"the launcher sent the survivors SIGTERM {stop:.2f} s after the kill (its own log "
             f"line); its process exited {d['launcher_after_s']:.2f} s after the kill (teardown)"
             if stop is not None else f"the launcher's process exited "
             f"{d['launcher_after_s']:.2f} s after the kill")
    lines = [f"{label}: the survivors noticed — {surv or 'nothing raised'}; {acted}, and it "
             f"blamed rank(s) {d['blamed']}: {d['message']}"]
    grace = d["grace_s"]
    for r, (a, _) in d["survivors"].items():
        if grace is not None:
            lines.append(f"{label}: rank {r} raised its own error {a:.2f} s after the kill, "
                         + ("before" if a < grace else "after")
                         + f" the launcher's {grace:g} s grace before it stops the other ranks "
                         "(SIGTERM): " + ("it lost its peer; the launcher did not stop it."
                                          if a < grace else "the launcher may have stopped it."))
    return lines


def takeaways(timing, hang_out, order_out, drift_out, slow_out, nan_out, killed_out,
              group_timeout_s: float, healthy=None) -> list[str]:
    """The closing sentences: each fault's time to its first naming message, from the runs."""
    by = {r["section"]: r for r in timing}
    sec = lambda key: by.get(key, {}).get("first_message_s")  # noqa: E731
    lines = []
    if sec("1 hang") is not None and sec("1 order+DETAIL") is not None:
        lines.append(f"A skipped collective (no tool on): its first message came "
                     f"{sec('1 hang'):.3f} s after the fault (the earliest rank's): the timeout "
                     f"this notebook set ({group_timeout_s:g} s; with torch's default for gloo, "
                     "30 min, it would have been that long: an extrapolation, not run), and the "
                     "timeout named no rank. Another fault, "
                     "collectives in a different order, run with DETAIL on, was named "
                     f"{sec('1 order+DETAIL'):.3f} s after it struck (one run each).")
    d = diagnose.divergence(drift_out.steps())
    if d["ranks"]:
        lines.append(f"The drifting weights raised nothing; the checksums named rank(s) "
                     f"{d['ranks']} at step {d['update_step']}.")
    if healthy is not None:
        from dltutor.debug import straggler as st
        lines += st.takeaway(slow_out, healthy)
    n = diagnose.first_nonfinite(nan_out.steps())
    if n["step"] is not None:
        lines.append(f"One rank's inf (rank {n['rank']}, step {n['step']}) made the parameters of "
                     f"{len(n['params_nonfinite_ranks'])} of {len({x['rank'] for x in nan_out.steps()})}"
                     " ranks non-finite within that step.")
    k = diagnose.killed(killed_out)
    if k["launcher_after_s"] is not None:
        peer = (f"its peer raised an error {min(a for a, _ in k['survivors'].values()):.2f} s after "
                "the kill" if k["survivors"] else "the launcher stopped its peer before it raised "
                "anything")
        lines.append(f"A killed rank: {peer}, and the course launcher returned, blaming rank(s) "
                     f"{k['blamed']}, {k['launcher_after_s']:.2f} s after the kill.")
    return lines


def unchecked(out) -> list[str]:
    """What a mismatched collective did with no check and no DETAIL (each rank's first error)."""
    rows = diagnose.hang(out)["rows"]
    if not rows:
        return ["Without any check this run raised nothing: the mismatch went unnoticed."]
    lines = [f"No check: rank {r['rank']} after {r['after_s']:.2f} s: {r['message']}" for r in rows]
    if all(r["timeout_ms"] for r in rows):
        lines.append("Every rank ended at the group's timeout: on gloo this mismatch hung, and "
                     "no message names the shape.")
    else:
        lines.append("Not every rank ended at the timeout: gloo reported it another way (above).")
    return lines


def by_hand(out, marker: str = "averaged by hand") -> list[str]:
    """The line each rank printed in its log when it averaged gradients by hand under DETAIL."""
    found = [f"rank {r}'s log: {ln.strip()}" for r in sorted({m["rank"] for m in out.metrics})
             for ln in out.log(r).splitlines() if marker in ln]
    return found or [f"No rank's log says its gradients were {marker}."]
