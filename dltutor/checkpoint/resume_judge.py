"""What notebook 10's resume check decides from the ranks' reports (exercise_resume runs the
student's app state and collects them; this module only reads them).

The reports: `reference` (per rank: the uninterrupted run's state after every step, step 0 too:
digests of the parameters, Adam's state, the torch and Python RNG states, and the loop's step,
epoch and offset; the losses), `killed`/`stopped` (the first run's end), `resumed` (per rank: the
same digests right after the student's load_state_dict, and the checkpoint loaded), `end` (the
resumed run's losses and final parameters) and `error` (the student's code raised: where, what).

Each piece that differs right after the resume is named, with what likely left it out: the
freshly seeded or initialised value (not restored at all), another rank's RNG (one key for every
rank: DCP keeps one copy), a step off by one. Then the rest of the run: the losses and final
parameters against the uninterrupted run's.
"""
from __future__ import annotations

PIECES = ("step", "params", "optimizer", "torch_rng", "python_rng", "epoch", "offset")


def _ranks(rs) -> str:
    rs = sorted(rs)
    return f"rank {rs[0]}" if len(rs) == 1 else "ranks " + " and ".join(map(str, rs))


def _rng(name: str, why: str, got: str, want: dict, fresh: str, r: int) -> str:
    """What differs about rank r's `name` RNG state (`want`: every rank's at the step)."""
    other = [o for o, d in want.items() if o != r and d == got]
    if other:
        return (f"the {name} RNG state of rank {r} is rank {other[0]}'s: every rank saved its "
                f"state under the same key and DCP kept one copy; save each rank's under a key "
                f"of its own (e.g. with loop.rank in it)")
    if got == fresh:
        return (f"the {name} RNG state is the freshly seeded one: the {name} RNG was not saved or "
                f"not set back ({why})")
    return f"the {name} RNG state differs from the uninterrupted run's ({why})"


def piece_problem(piece: str, got: dict, want: dict, fresh: dict, every: dict, r: int) -> str | None:
    """The message for one piece of rank r's state (`every`: each rank's want), or None."""
    g, w = got[piece], want[piece]
    if g == w:
        return None
    if piece == "step":
        why = ("off by one, a step is skipped or done twice" if abs(g - w) == 1 else
               "a fresh run's step: it was not saved, not set back, or saved as it was when the "
               "dict was built" if g == fresh["step"] else "a step of another time")
        return (f"the step is {g} where the checkpoint is of step {w}: save loop.step and set it "
                f"back as it was ({why})")
    if piece == "params":
        if g == fresh["params"]:
            return ("the model's parameters are the freshly initialised ones: the model was not "
                    "set back (set_state_dict's model_state_dict)")
        return "the model's parameters differ from the uninterrupted run's"
    if piece == "optimizer":
        if got["optimizer_fresh"]:
            return ("Adam's state is a fresh optimizer's (its moments empty or zero): the optimizer "
                    "was not saved or not set back (get_state_dict's and set_state_dict's "
                    "optimizer part)")
        return "Adam's state (moments, step counts) differs from the uninterrupted run's"
    if piece in ("torch_rng", "python_rng"):
        name, why = (("torch", "dropout draws from it: torch.get_rng_state/set_rng_state")
                     if piece == "torch_rng" else
                     ("Python", "the flips draw from it: random.getstate/setstate"))
        return _rng(name, why, g, {o: e[piece] for o, e in every.items()}, fresh[piece], r)
    if piece == "epoch":
        return (f"the sampler epoch is {g} where the uninterrupted run was in epoch {w}: save "
                "loop.epoch and set it back (the sampler's order comes from the seed and the epoch)")
    return (f"the data position is batch {g} of the epoch where the uninterrupted run was at "
            f"batch {w}: save loop.offset and set it back (else batches are done twice or skipped)")


def resume_problems(ref: dict, resumed: dict, c: int) -> list[str]:
    """Each piece of state that differs right after the resume, merged over the ranks."""
    every = {r: ref[r]["probes"][c] for r in ref}
    found: dict[str, list[int]] = {}
    for r in sorted(resumed):
        got, fresh = resumed[r]["probe"], ref[r]["probes"][0]
        for piece in PIECES:
            text = piece_problem(piece, got, every[r], fresh, every, r)
            if text:
                found.setdefault(text, []).append(r)
    out = [f"right after the resume from step {c}, on {_ranks(rs)}: {text}" for text, rs in found.items()]
    wrong_ranks = {r for rs in found.values() for r in rs}
    right = sorted(set(resumed) - wrong_ranks)
    if out and right and all(resumed[r]["probe"]["step"] == ref[r]["probes"][0]["step"] != c
                             for r in wrong_ranks):
        out.append(f"{_ranks(right)} resumed right and {_ranks(wrong_ranks)} did not: every rank "
                   "must set back its own state in load_state_dict, not rank 0 alone")
    return out


def end_problems(ref: dict, end: dict) -> list[str]:
    """The resumed run's losses and final parameters against the uninterrupted run's."""
    out = []
    apart = next((e["apart"] for e in end.values() if e.get("apart")), None)
    if apart:
        return [f"the ranks resumed at different steps ({', '.join(map(str, apart))} by rank), so "
                "they could not train on together (their collectives would not match): not run on"]
    for r in sorted(end):
        want, got, first = ref[r]["losses"], end[r]["losses"], end[r]["first_step"]
        steps = [first + i + 1 for i, x in enumerate(got) if first + i >= len(want) or x != want[first + i]]
        if end[r]["final"] != ref[r]["final"] or steps:
            where = f"; its loss differs from step {steps[0]} on" if steps else ""
            out.append(f"rank {r} ended with other final parameters than the uninterrupted run{where}")
    return out[:1] + ([f"the same on {len(out) - 1} more rank(s)"] if len(out) > 1 else [])


def error_lines(records) -> list[str]:
    """What the student's code raised, where (at most one line per rank)."""
    errors = {m.get("rank"): m for m in reversed(records) if m.get("event") == "error"}
    return [f"rank {r} failed {m.get('where')}: {' '.join(str(m.get('error')).split())[:300]}"
            for r, m in sorted(errors.items(), key=lambda kv: kv[0] or 0)]


def launch_problems(ran, plan: dict, phase: str) -> list[str]:
    """What went wrong in one launch: the student's code raised, or the run failed otherwise (a
    kill is a failure only when it was not the plan's)."""
    errors = error_lines(ran.metrics)
    if errors:
        return errors
    mine = [m.get("event") for m in ran.metrics if m.get("rank") == plan["rank"]]
    killed = "killed" in mine and "stopped" not in mine and ran.failure is not None  # it died
    if phase == "first" and plan["mode"] == "kill" and not killed:
        return [f"the first run was to be killed after step {plan['step']} and was not: "
                f"{ran.failure or 'it ended normally'}"]
    if ran.failure and not (phase == "first" and killed):
        which = "the first run" if phase == "first" else "the resumed run"
        return [f"{which} failed: {ran.failure}"]
    return []


def _by_rank(records, event: str) -> dict:
    return {m["rank"]: m for m in records if m.get("event") == event}


def how_it_ended(plan: dict) -> str:
    if plan["mode"] == "kill":
        return f"rank {plan['rank']} SIGKILLed after step {plan['step']}"
    return f"both ranks saved step {plan['step']} and stopped (a job at its time limit)"


def judge(records: list[dict], plan: dict) -> tuple[list[str], str]:
    """(problems, summary) from every report of both launches (one answer's, plus the reference)."""
    if error_lines(records):
        return error_lines(records), ""
    ref, resumed, end = (_by_rank(records, e) for e in ("reference", "resumed", "end"))
    ranks = sorted(ref)
    absent = [f"rank {r} reported no {e} state" for e, got in (("resumed", resumed), ("final", end))
              for r in ranks if r not in got]
    if not ranks or absent:
        return absent or ["the uninterrupted run reported nothing"], ""
    names = {resumed[r]["checkpoint"] for r in ranks}
    if None in names:
        return [f"{how_it_ended(plan)}, and the new run found no complete checkpoint to resume "
                "from: dcp.save never finished one"], ""
    c = int(sorted(names)[0].split("-")[1])
    problems = resume_problems(ref, resumed, c)
    later = end_problems(ref, end)
    if problems:
        return [f"{how_it_ended(plan)} (seed {plan['seed']})", *problems, *later], ""
    if later:
        return [f"{how_it_ended(plan)}; every piece of state matched right after the resume from "
                f"step {c}, but:", *later], ""
    p = resumed[ranks[0]]["probe"]
    redone = ("" if c >= plan["step"] else f" (step {c + 1} done again)" if c + 1 == plan["step"]
              else f" (steps {c + 1}-{plan['step']} done again)")
    return [], (f"{how_it_ended(plan)} (seed {plan['seed']}); the new run resumed from step {c}"
                f"{redone}: on "
                f"{_ranks(ranks)} the parameters, Adam's state, the torch and Python RNG states, "
                f"the step and the data position (epoch {p['epoch']}, batch {p['offset']}) equal the "
                f"uninterrupted run's at step {c}, and the losses of {_steps(c + 1, len(ref[ranks[0]]['losses']))} "
                f"and the final parameters (sha256 "
                f"{ref[ranks[0]]['final'][:16]}) are bit-identical (2 gloo ranks on CPU)")


def _steps(first: int, last: int) -> str:
    """'step 18' or 'steps 11-18'."""
    return f"step {first}" if first == last else f"steps {first}-{last}"
