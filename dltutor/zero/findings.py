"""What notebook 04 prints as "what this run shows": sentences built from the numbers only.

    fit_findings(p, d, [16, 32], s=512, b=1, h=1024, L=192, a=16)   # the paper calculation
    budget_findings(oom, params, budget_mb)   # why the plain run died (its OOM line, measured)
    ratio_findings(rows)                      # measured / formula per stage (section 4's sweep)
    speed_findings(rows)                      # samples/s of each stage vs stage 0, with spreads
    fsdp_findings(fsdp_row, zero0_row, zero3_row)   # FSDP2's losses and bytes beside ZeRO's

Each returns a list of sentences for `dltutor.core.findings.show`. A difference inside the run's
spread says "inconclusive here" (`dltutor.core.findings.INCONCLUSIVE`).
"""
from __future__ import annotations

import re

from dltutor.core.findings import INCONCLUSIVE, compare, fmt
from dltutor.core.units import GiB, MiB
from dltutor.zero import memory

RATIO_TOLERANCE = 0.10   # measured / formula within 1 ± 0.10 counts as "near 1"
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
_UNITS = {"bytes": 1, "KiB": 1024, "MiB": MiB, "GiB": GiB}


def budget_findings(oom: dict, params: int, budget_mb: float, bytes_per_param: int = 16) -> list[str]:
    """Why the plain run failed (or did not): its formula vs the budget, then what its OOM line
    measured: the phase, the bytes it held beyond start-up, the allocation refused."""
    formula = bytes_per_param * params / MiB
    room = budget_mb - formula
    out = [f"Plain run, formula {bytes_per_param} p = {formula:.0f} MiB of model states vs a "
           f"{budget_mb:.0f} MiB budget: " + (f"{room:.0f} MiB left for everything else." if room >= 0
                                                else f"over it by {-room:.0f} MiB on paper already.")]
    if not oom.get("oom"):
        return out + ["The plain run did not run out of memory here, so this run cannot say what "
                      "the budget was spent on."]
    text = "\n".join(oom.get("lines") or [])
    phase, held, asked = _PHASE.search(text), _HELD.search(text), _ASKED.search(text)
    out.append(f"It died during {phase.group(1) if phase else 'a phase its log does not name'}.")
    if held:
        used, start, limit = (int(x) for x in held.groups())
        beyond = used - start
        gap = (f"{beyond - formula:.0f} MiB more than the formula's {formula:.0f} MiB of model "
               "states: that excess is not model states (activations, the autograd graph, Adam's "
               "temporaries)" if beyond >= formula else
               f"{formula - beyond:.0f} MiB less than the formula's {formula:.0f} MiB of model "
               "states: it died before all of them existed")
        out.append(f"When the allocator said no, the process held {beyond} MiB beyond its start-up "
                   f"{start} MiB (limit {limit} MiB), {gap}.")
    if asked:
        size = float(asked.group(1)) * _UNITS[asked.group(2)] / MiB
        past = f", which would have ended {used + size - limit:.0f} MiB past the limit" if held else ""
        out.append(f"The refused allocation asked for {size:.1f} MiB more{past}.")
    return out


def ratio_findings(rows, tolerance: float = RATIO_TOLERANCE) -> list[str]:
    """Which configs' measured / formula sits within `tolerance` of 1, which above or below."""
    near, above, below = [], [], []
    for r in rows:
        if r.get("ratio") is None:
            continue
        item = f"{r['label']} ({r['ratio']:.2f})"
        (near if abs(r["ratio"] - 1) <= tolerance else above if r["ratio"] > 1 else below).append(item)
    out = [f"measured / formula within 1 ± {tolerance:g}: " + (", ".join(near) or "none") + "."]
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


def speed_findings(rows, base: str = "zero0") -> list[str]:
    """Samples/s of every config beside `base`'s, with each run's per-step spread."""
    ref = next((r for r in rows if r["config"] == base), None)
    if ref is None or not ref.get("samples_per_s"):
        return [f"no {base} run with a speed in these rows: nothing to compare against."]
    out = []
    for r in rows:
        if r is ref or not r.get("samples_per_s"):
            continue
        sa, sb = r.get("samples_per_s_spread"), ref.get("samples_per_s_spread")
        line = compare(r["label"], r["samples_per_s"], ref["label"], ref["samples_per_s"],
                       unit="samples/s", spread_a=sa or 0.0, spread_b=sb or 0.0)
        if sa is None or sb is None:
            line += " (fewer than 2 timed steps: no spread, read it as indicative only)"
        out.append(line)
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


__all__ = ["INCONCLUSIVE", "budget_findings", "fit_findings", "fsdp_findings", "ratio_findings",
           "speed_findings", "stage_fit"]
