"""What notebook 04 prints as "what this run shows": sentences built from the numbers only.

    fit_findings(p, d, [16, 32], s=512, b=1, h=1024, L=192, a=16)   # the paper calculation
    budget_findings(oom, params, budget_mb)   # why the plain run died (its traceback frame)
    ratio_findings(rows)                      # measured / formula per stage (section 4's sweep)
    speed_findings(rows)                      # samples/s of each stage vs stage 0, with spreads
    count_findings(rows)                      # memory is a count: the same in every round?
    fsdp_findings(fsdp_row, zero0_row, zero3_row)   # FSDP2's losses and bytes beside ZeRO's

Each returns a list of sentences for `dltutor.core.findings.show`. A difference inside the run's
spread says "inconclusive here" (`dltutor.core.findings.INCONCLUSIVE`).
"""
from __future__ import annotations

import re
from pathlib import Path

from dltutor.core.findings import INCONCLUSIVE, fmt
from dltutor.core.units import GiB, MiB
from dltutor.zero import memory
from dltutor.zero.speed import speed_findings, why_undecided  # noqa: F401 (re-exported)

RATIO_TOLERANCE = 0.10   # measured / formula within 10 % of 1 counts as "near 1" (a tolerance)
LOSS_TOLERANCE = 1e-4    # relative: what float32 round-off in a different summation order allows
_ACTIVATION_KEYS = ("s", "b", "h", "L", "a")


def _gib(x: float) -> str:
    return f"{x / GiB:.1f} GiB"


def stage_fit(est: memory.MemoryEstimate, device_bytes: float) -> str:
    """One stage at one d: model states + activations vs the device, and which part is to blame."""
    head = (f"stage {est.stage}, d={est.d}: model states {_gib(est.model_states)} + activations "
            f"{_gib(est.M_a)} = {_gib(est.total)} vs {_gib(device_bytes)}")
    if est.total <= device_bytes:
        return f"{head}: fits ({_gib(device_bytes - est.total)} to spare)."
    if est.model_states > device_bytes:
        return f"{head}: does not fit, the model states alone already exceed the device."
    if est.M_a > device_bytes:
        return f"{head}: does not fit, the activations alone already exceed the device."
    return f"{head}: does not fit, the model states fit but the activations push the total over."


def fit_findings(p: int, d: int, device_gibs, per_stage: bool = True, **act) -> list[str]:
    """The paper calculation: every stage at `d` on the first device size (`per_stage`), then for
    each size the lowest stage that fits at `d` and the fewest ranks for stage 3, with and
    without the activations M_a (`act`: s, b, h, L, a and the precision, as estimate_zero_memory)."""
    first = device_gibs[0] * GiB
    out = [stage_fit(e, first) for e in memory.estimate_all_stages(p, d=d, **act)] if per_stage else []
    states_only = {k: v for k, v in act.items() if k not in _ACTIVATION_KEYS}
    m_a = memory.estimate_zero_memory(p, **act).M_a
    for gib in device_gibs:
        dev = gib * GiB
        low = memory.smallest_fitting_stage(p, dev, d=d, **act)
        stage = f"stage {low} is the lowest that fits" if low is not None else "no stage fits"
        with_a = memory.smallest_fitting_d(p, dev, z=3, **act)
        without = memory.smallest_fitting_d(p, dev, z=3, **states_only)
        if with_a is None:
            ranks = (f"stage 3 fits at no d: the activations alone ({_gib(m_a)}) exceed the device"
                     if m_a > dev else "stage 3 does not fit at any d tried")
        elif with_a == without:
            ranks = (f"stage 3 fits from d={with_a}, with or without the activations "
                     f"({_gib(m_a)} per GPU): here they do not change the answer")
        else:
            ranks = (f"stage 3 fits from d={with_a} counting the activations ({_gib(m_a)} per GPU, "
                     f"not divided by d), from d={without} counting the model states alone: "
                     f"{with_a - without} more rank(s) because ZeRO does not partition activations")
        out.append(f"{gib} GiB GPU: at d={d} {stage}; {ranks}.")
    return out


_HELD = re.compile(r"held (\d+) MiB, start-up (\d+) MiB, limit (\d+) MiB")
_ASKED = re.compile(r"(?:tried to allocate|Tried to allocate)\s+([\d.]+)\s*(bytes|KiB|MiB|GiB)")
_PHASE = re.compile(r"OUT OF MEMORY during (.+?): ")
_ITERATION = re.compile(r"iteration (\d+)")
_UNITS = {"bytes": 1, "KiB": 1024, "MiB": MiB, "GiB": GiB}
# plain PyTorch Adam keeps fp32 parameters (even under autocast): 4 p weights, 4 p gradients,
# 8 p for the two moments; train_step clears the gradients to None before each forward
_WEIGHTS, _GRADS, _MOMENTS = 4, 4, 8
PHASES = {"adam_state": "the creation of Adam's state (its first step allocates exp_avg and "
                        "exp_avg_sq for every parameter)",
          "optimizer_step": "Adam's update of the weights (optimizer step)",
          "backward": "backward", "forward": "forward"}


def died_in(frames) -> tuple[str | None, dict | None]:
    """(phase, frame): the part of a training step the innermost frame it recognises names.

    `frames` are a traceback's (innermost last, dicts with file, line, func, code, as
    `dltutor.zero.runs.traceback_frames` reads them); phase is a key of PHASES or None."""
    for f in reversed(frames or []):
        name, func = f["file"].replace("\\", "/"), f["func"]
        if func == "_init_group":
            return "adam_state", f
        if "/autograd/" in name or "backward" in func:
            return "backward", f
        if name.endswith(("/adam.py", "/adamw.py", "/optimizer.py")) or func.endswith("_adam"):
            return "optimizer_step", f
        if func == "forward":
            return "forward", f
    return None, None


def _states_then(phase: str, first: bool, p: int) -> tuple[float, str]:
    """At most this many MiB of model states existed when `phase` failed, and which ones."""
    if phase == "forward":
        return ((_WEIGHTS * p, "the weights (4 p)") if first
                else ((_WEIGHTS + _MOMENTS) * p, "the weights and Adam's moments (12 p)"))
    if phase == "backward" and first:
        return (_WEIGHTS + _GRADS) * p, "the weights and the gradients made so far (8 p)"
    return ((_WEIGHTS + _GRADS + _MOMENTS) * p,
            "all of them (16 p)" if phase == "optimizer_step" else "at most all of them (16 p)")


def _conclusion(phase: str | None, first: bool, p: int, full: float) -> str:
    """What dying in `phase` says about the `full` MiB the budget held then."""
    if phase is None:
        return ("Its log has no traceback frame from forward, backward or Adam, so this run "
                "cannot say which part of the step ran out.")
    if phase == "adam_state":
        return (f"Adam's moments ({_MOMENTS} p = {_MOMENTS * p / MiB:.0f} MiB in the formula) were "
                "still being created, so the model states did not all exist yet: the weights, "
                "their gradients, the moments made so far and whatever else was still allocated "
                f"filled the {full:.0f} MiB. This run shows that 16 p of model states plus that "
                "rest do not fit; it cannot say how much more they would have needed.")
    states, which = _states_then(phase, first, p)
    rest = full - states / MiB
    other = ("Adam's temporaries and anything else still allocated" if phase == "optimizer_step"
             else "the activations kept for backward and the autograd graph")
    if rest <= 0:
        return (f"Model states then: {which}, up to {states / MiB:.0f} MiB, no less than the "
                f"{full:.0f} MiB it held: they alone can explain the failure.")
    return (f"Model states then: {which}, at most {states / MiB:.0f} MiB of the {full:.0f} MiB "
            f"it held, so at least {rest:.0f} MiB were not model states ({other}).")


def _request(asked, budget: float) -> str:
    size = float(asked.group(1)) * _UNITS[asked.group(2)]
    shown = f"{size / MiB:.2f} MiB" if size < 10 * MiB else f"{size / MiB:.0f} MiB"
    kind = ("a small one: the budget was already full" if size / MiB <= 0.05 * budget
            else "a large one that did not fit in what was left")
    return f"The refused request was for {shown} ({size:,.0f} bytes), {kind}."


def budget_findings(oom: dict, params: int, budget_mb: float) -> list[str]:
    """Why the plain run failed (or did not): its formula vs the budget, then where it died (the
    innermost traceback frame of `oom["frames"]`), what that says, and the refused request."""
    formula = (_WEIGHTS + _GRADS + _MOMENTS) * params / MiB
    room = budget_mb - formula
    out = [f"Plain run, formula 16 p = {formula:.0f} MiB of model states vs a "
           f"{budget_mb:.0f} MiB budget: " + (f"{room:.0f} MiB left for everything else." if room >= 0
                                                else f"over it by {-room:.0f} MiB on paper already.")]
    if not oom.get("oom"):
        return out + ["The plain run did not run out of memory here, so this run cannot say what "
                      "the budget was spent on."]
    text = "\n".join(oom.get("lines") or [])
    phase_line, held, asked = _PHASE.search(text), _HELD.search(text), _ASKED.search(text)
    phase, frame = died_in(oom.get("frames"))
    where = (f"It died in {PHASES[phase]}: {Path(frame['file']).name}:{frame['line']} in "
             f"{frame['func']}" + (f" (`{frame['code']}`)" if frame.get("code") else "")
             if phase else "Its traceback names no part of the step this reads")
    lab = f"; the lab's line says {phase_line.group(1)!r}" if phase_line else ""
    out.append(where + lab + ".")
    it = _ITERATION.search(phase_line.group(1)) if phase_line else None
    full = budget_mb
    if held:
        used, start, limit = (int(x) for x in held.groups())
        full = used - start
    out.append(_conclusion(phase, bool(it and it.group(1) == "0"), params, full))
    if asked:
        out.append(_request(asked, budget_mb))
    return out


def ratio_findings(rows, tolerance: float = RATIO_TOLERANCE) -> list[str]:
    """Which configs' measured / formula sits within `tolerance` of 1, which above or below."""
    near, above, below = [], [], []
    for r in rows:
        if r.get("ratio") is None:
            continue
        item = f"{r['label']} ({r['ratio']:.2f})"
        (near if abs(r["ratio"] - 1) <= tolerance else above if r["ratio"] > 1 else below).append(item)
    out = [f"measured / formula within {100 * tolerance:g} % of the formula (a tolerance, not an "
           f"interval: the counts are exact): " + (", ".join(near) or "none") + "."]
    if above:
        out.append("above it (more held than the formula): " + ", ".join(above) + ".")
    if below:
        out.append("below it (less held than the formula): " + ", ".join(below) + ".")
    by = {r["config"]: r for r in rows}
    if "zero3" in by and "zero3_offload_cpu" in by:
        a, b = by["zero3_offload_cpu"]["measured"], by["zero3"]["measured"]
        out.append(f"model states held, stage 3 + CPU offload {fmt(a, 'MiB')} vs stage 3 "
                   f"{fmt(b, 'MiB')}: offload to host RAM " + (
                       "leaves this process's total unchanged within 5 %" if abs(a - b) <= 0.05 * b
                       else ("holds less" if a < b else "holds more")) + " here.")
    return out


def count_findings(rows) -> list[str]:
    """Memory is a count (bytes of the tensors a rank holds), not a timing: no interval; where the
    sweep ran in rounds, whether each config's count was the same in every round."""
    many = [r for r in rows if len(r.get("measured_rounds") or []) > 1]
    if not many:
        return ["The memory columns are counts of the bytes of the tensors rank 0 held, not timings: "
                "they carry no interval (one round here, so no repeat to check them against)."]
    same = [r["label"] for r in many if max(r["measured_rounds"]) - min(r["measured_rounds"]) < 1e-6]
    moved = [f"{r['label']} ({min(r['measured_rounds']):.1f}-{max(r['measured_rounds']):.1f} MiB)"
             for r in many if r["label"] not in same]
    out = [f"The memory columns are counts of the bytes of the tensors rank 0 held, not timings: "
           f"no interval needed. Same count in all {len(many[0]['measured_rounds'])} rounds: "
           + (", ".join(same) or "none") + "."]
    if moved:
        out.append("Counts that changed between rounds: " + ", ".join(moved) + ".")
    return out


def fsdp_findings(fsdp_row: dict, zero0: dict, zero3: dict | None = None,
                  tolerance: float = LOSS_TOLERANCE) -> list[str]:
    """FSDP2's loss trajectory against stage 0's, and bytes per parameter beside ZeRO-3's."""
    a, b = fsdp_row["losses"], zero0["losses"]
    if len(a) != len(b):
        return [f"FSDP2 ran {len(a)} steps, stage 0 {len(b)}: the trajectories cannot be compared."]
    diff = max(abs(x - y) for x, y in zip(a, b))
    rel = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    verdict = (f"within {tolerance:g} relative, float32 round-off: they agree" if rel <= tolerance
               else f"more than {tolerance:g} relative: they differ beyond round-off")
    out = [f"FSDP2 vs stage 0 over {len(a)} steps: largest |loss difference| {diff:.2e} "
           f"(relative {rel:.2e}), {verdict}."]
    for r in [zero3, fsdp_row]:
        if r and r.get("params"):
            per = r["measured"] * MiB * r["ranks"] / r["params"]
            out.append(f"{r['label']}: {per:.1f} bytes per parameter over all {r['ranks']} ranks "
                       f"(formula {r['predicted'] * MiB * r['ranks'] / r['params']:.1f}).")
    return out


__all__ = ["INCONCLUSIVE", "PHASES", "budget_findings", "count_findings", "died_in", "fit_findings",
           "fsdp_findings", "ratio_findings", "speed_findings", "stage_fit", "why_undecided"]
