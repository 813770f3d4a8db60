"""The sentences notebook 10 prints: what its resumes, reshards and restarts showed, from their numbers.

Each function takes the numbers of dltutor.checkpoint.lab_runs (plain dicts, so a test can make
them up) and says "bit for bit" only when every compared loss is equal (`first_diff_step` None)
and the largest parameter difference is exactly 0.0; otherwise it says where and by how much the
runs part.
"""
from __future__ import annotations

from dltutor.core.findings import fmt

WHY_PART = {"rng": "the dropout generators start again from the seed",
            "optimizer": "Adam's moments and step counts start again from zero",
            "data": "the data stream starts again at epoch 0, batch 0",
            "model": "the weights start again from their initial values"}


def exact(gap: dict) -> bool:
    """True when the losses and the final parameters are equal bit for bit."""
    return gap["first_diff_step"] is None and gap["param_max_diff"] == 0.0 and gap.get("steps", 1) > 0


def _diff(x: float) -> str:
    return "0.0" if x == 0.0 else f"{x:.3g}"


def _parted(gap: dict) -> str:
    """'the losses first differ at step N, K step(s) after the resume (by up to X); the final
    parameters by up to Y (another sha256)'."""
    params = f"the final parameters by up to {_diff(gap['param_max_diff'])}"
    params += " (another sha256)" if not gap.get("same_digest", False) else " (the same sha256)"
    if gap["first_diff_step"] is None:
        return f"every loss is equal, but {params}"
    when = gap["first_diff_step"]
    after = (f", {when - gap['resumed_from']} step(s) after the resume from step {gap['resumed_from']}"
             if gap.get("resumed_from") is not None else "")
    return (f"the losses first differ at step {when}{after} (by up to {_diff(gap['loss_max_diff'])}); "
            f"{params}")


def resume(gaps) -> list[str]:
    """One sentence per stopped-and-resumed run (lab_runs.resume_gap's dicts), against its
    uninterrupted twin."""
    lines = []
    for g in gaps:
        who = (f"{g['wrap'].upper()} on {g['world_size']} ranks ({g['hardware']}), stopped after "
               f"step {g['stop_at']} and resumed from the step-{g['resumed_from']} checkpoint")
        if g["resumed_from"] != g["stop_at"]:
            who += f" (not step {g['stop_at']}, where it stopped)"
        if exact(g):
            after = (g["total_steps"] - g["resumed_from"]) * g["world_size"]
            lines.append(f"{who}: all {after} losses after the resume (every rank, steps "
                         f"{g['resumed_from'] + 1}-{g['total_steps']}) and the {g['steps'] - after} "
                         f"before it equal the uninterrupted run's bit for bit, and so do the final "
                         f"parameters (largest difference {_diff(g['param_max_diff'])}, the same sha256).")
        else:
            lines.append(f"{who}: NOT bit for bit: {_parted(g)}.")
    return lines


def parts(rows) -> list[str]:
    """One sentence per part left out of the checkpoint (lab_runs.left_out's values), then which
    parts this run needed."""
    lines, needed, spare = [], [], []
    for r in rows:
        part, why = r["left_out"], WHY_PART.get(r["left_out"], "")
        head = f"Without `{part}` ({why})" if why else f"Without `{part}`"
        if exact(r):
            spare.append(part)
            lines.append(f"{head}: every loss and the final parameters still equal the uninterrupted "
                         f"run's: this run did not need it.")
            continue
        needed.append(part)
        lines.append(f"{head}: {_parted(r)}.")
    if needed:
        lines.append(f"Each of {', '.join(needed)} was needed for a bit-for-bit resume here"
                     + (f"; {', '.join(spare)} made no difference in this run." if spare else "."))
    elif spare:
        lines.append("No part left out changed this run: it cannot show what the parts are for.")
    return lines


def reshard(result: dict) -> list[str]:
    """Saved on N ranks, loaded on others and converted (lab_runs.reshard_runs): exact or not."""
    rows, n = result["rows"], result["save_ranks"]
    head = f"Saved on {n} {result['wrap'].upper()} ranks ({result['hardware']}) at step {result['step']}"
    same = [r for r in rows if r["param_max_diff"] == 0.0]
    other = [r for r in rows if r["param_max_diff"] != 0.0]
    where = "; ".join(r["loaded_on"] for r in same)
    lines = []
    if same and not other:
        lines.append(f"{head}; loaded on {where}: the largest parameter difference is 0.0 in every "
                     "case: the parameters reshard exactly (Adam's moments were loaded too, not compared here).")
    else:
        if same:
            lines.append(f"{head}; loaded on {where}: the parameters exact (largest difference 0.0).")
        lines += [f"{head}; loaded on {r['loaded_on']}: NOT exact, the parameters differ by up to "
                  f"{_diff(r['param_max_diff'])}." for r in other]
    late = [r for r in rows if r["resumed_from"] != result["step"]]
    lines += [f"{r['loaded_on']} resumed from step {r['resumed_from']}, not {result['step']}." for r in late]
    return lines


def restart(rows) -> list[str]:
    """One or two sentences per restart (lab_runs.restart_runs' values: torchrun's or the course's)."""
    lines = []
    for r in rows:
        if r["rc"] != 0 or r["restart_count"] is None:
            lines.append(f"{r['kind']}: the job did not finish (exit code {r['rc']}): no "
                         "restart was measured; its log folder holds why.")
            continue
        what = (f"rank {r['killed_rank']} was SIGKILLed at step {r['killed_step']} ({r['kill_where']})"
                if r["killed_rank"] is not None else "no rank was killed")
        torn = "; ".join(f"{name} ({len(files)} shard file(s), no .metadata) was skipped"
                         for name, files in sorted(r["skipped"].items()))
        who = "torchrun" if r.get("via", "torchrun") == "torchrun" else "the course's launch"
        lines.append(f"{r['kind']} ({r['hardware']}): {what}; {who} restarted both ranks (restart "
                     f"{r['restart_count']} of at most {r['max_restarts']}), which resumed from step "
                     f"{r['resumed_from']}" + (f" ({torn})" if torn else "") + f", redid "
                     f"{r['steps_redone']} step(s) and were training again "
                     f"{fmt(r['kill_to_training_s'], 's')} after the kill.")
        if r["param_max_diff"] == 0.0 and r["same_digest"]:
            lines.append(f"{r['kind']}: the final parameters equal the uninterrupted run's bit for bit "
                         "(largest difference 0.0, the same sha256).")
        elif r["param_max_diff"] is not None:
            lines.append(f"{r['kind']}: the final parameters differ from the uninterrupted run's by up "
                         f"to {_diff(r['param_max_diff'])}: NOT bit for bit.")
    return lines


def takeaways(gaps, part_rows, reshard_result, restart_rows) -> list[str]:
    """Key takeaways of sections 2-5 from their numbers, one line each."""
    ok = [g["wrap"].upper() for g in gaps if exact(g)]
    bad = [g["wrap"].upper() for g in gaps if not exact(g)]
    lines = [(f"Stop and resume was bit for bit for {' and '.join(ok)}" if ok else "No resume was bit for bit")
             + (f"; NOT for {' and '.join(bad)}." if bad else ".")]
    needed = [r["left_out"] for r in part_rows if not exact(r)]
    if needed:
        lines.append(f"Leaving out any one of {', '.join(needed)} broke it: the checkpoint needs "
                     "every piece of state the next steps read.")
    rows = reshard_result["rows"]
    worst = max(r["param_max_diff"] for r in rows)
    lines.append(f"A checkpoint of {reshard_result['save_ranks']} ranks, loaded on "
                 f"{'; '.join(r['loaded_on'] for r in rows)}: largest parameter difference {_diff(worst)}"
                 + (" (the parameters exact)." if worst == 0.0 else " (NOT exact)."))
    for r in restart_rows:
        if r["rc"] == 0 and r["kill_to_training_s"] is not None:
            who = "torchrun" if r.get("via", "torchrun") == "torchrun" else "the course's launch"
            lines.append(f"{r['kind']}, restarted by {who}: training again after "
                         f"{fmt(r['kill_to_training_s'], 's')}, {r['steps_redone']} step(s) redone, "
                         + ("final parameters bit for bit." if r["param_max_diff"] == 0.0
                            else "final parameters NOT bit for bit."))
    return lines


def requeue(out: dict, reference: dict) -> list[str]:
    """What the Slurm requeue job showed (dltutor.checkpoint.batch.collect's dict), against the
    same training uninterrupted (`reference`: batch.reference's rank-0 metrics)."""
    segs = out["segments"]
    if not segs:
        return [f"Job {out['job_id']} ended {out['state']} and its log ({out['log']}) shows no segment: "
                "nothing was measured; the log says why."]
    lines = [f"Job {out['job_id']} ran {len(segs)} time(s), one log for all ({out['state']} at the end)."]
    for s in segs:
        head = f"Segment {s['restart_count']} (SLURM_RESTART_COUNT={s['restart_count']}, on {s['nodes']})"
        start = (f"resumed from step {s['resumed_from']}" if s["resumed_from"] is not None
                 else "started fresh")
        if s["stop"] in ("SIGUSR1", "SIGTERM"):
            steps = sorted({r.get("signal_stop_step") for r in s["ranks"]}, key=str)
            lines.append(f"{head}: {start}; on {s['stop']} the {len(s['ranks'])} ranks' metrics lines "
                         f"say they stopped after step {', '.join(map(str, steps))}, saved it and the "
                         f"step exited {s['status']}"
                         + (" (the same step on every rank)." if len(steps) == 1 else
                            ": the ranks stopped at DIFFERENT steps."))
        elif s["stop"] == "completed":
            lines.append(f"{head}: {start}; trained to step {s['last_step']} and finished.")
        else:
            lines.append(f"{head}: {start}; ended without metrics ({s['stop']}).")
    done, ref = out.get("param_digest"), reference.get("param_digest")
    if done is None:
        lines.append("No segment finished: the final parameters could not be compared.")
    elif done == ref:
        lines.append(f"The final parameters equal the uninterrupted run's bit for bit (sha256 {done[:16]}).")
    else:
        lines.append(f"The final parameters differ from the uninterrupted run's (sha256 {done[:16]} vs "
                     f"{ref[:16]}): NOT bit for bit.")
    return lines
