"""Notebook 04's exercise: the model-state bytes per rank, per ZeRO stage, as a function.

The student writes `model_state_bytes(p, d, stage)`: the bytes of model states one of d ranks
holds when p parameters train in mixed precision with Adam (2p fp16 parameters, 2p fp16
gradients, 12p fp32 master copy + momentum + variance), stage 1 dividing the optimizer states
by d, stage 2 the gradients too, stage 3 the parameters too. Then, with that function and the
activation bytes, the smallest d at which stage 3 fits a 16 GB and an 80 GB GPU.

`check(fn, d_16gb, d_80gb, p, **act)` calls `fn` on cases drawn at random per check (p up to
10^12, d from 2 to 64, many not dividing p, every stage; d = 1 too) against
`dltutor.zero.memory.estimate_zero_memory(p, k_l=2, k_h=4, d=d, z=stage).model_states`, names
the first case that differs (and which term looks off, when it can tell), then checks the two
answers against `memory.smallest_fitting_d`.
"""
from __future__ import annotations

import numbers
import random

from dltutor.core.units import GiB
from dltutor.grading.verdict import from_problems, not_yet, wrong
from dltutor.zero import memory

EXERCISE = "04-memory"
K_L, K_H = 2, 4            # fp16 parameters and gradients, fp32 Adam
SLACK = 16                 # bytes: rounding each term to whole bytes (p/d need not divide)
TERMS = ("parameters", "gradients", "optimizer states")


def reference_model_state_bytes(p: int, d: int, stage: int) -> float:
    """The course's solution, written out: 2p + 2p + 12p, divided by d from the stage on."""
    params = 2 * p / (d if stage >= 3 else 1)
    grads = 2 * p / (d if stage >= 2 else 1)
    optim = 12 * p / (d if stage >= 1 else 1)
    return params + grads + optim


def expected(p: int, d: int, stage: int) -> float:
    return memory.estimate_zero_memory(p, k_l=K_L, k_h=K_H, d=d, z=stage).model_states


def _split(p: int, d: int, stage: int) -> tuple[float, float, float]:
    e = memory.estimate_zero_memory(p, k_l=K_L, k_h=K_H, d=d, z=stage)
    return e.M_m, e.M_g, e.M_o


def cases(rng: random.Random, n_models: int = 3) -> list[tuple[int, int, int]]:
    """(p, d, stage): every stage for a few models and rank counts (most d do not divide p),
    and each model on d = 1."""
    out = []
    for _ in range(n_models):
        p = rng.randrange(10**6, 10**12)
        d = rng.randrange(2, 65)
        p += p % d == 0                  # a d that does not divide p
        out += [(p, d, stage) for stage in range(4)] + [(p, 1, rng.randrange(4))]
    return out


def diagnose(p: int, d: int, stage: int, got: float) -> str | None:
    """Which term looks off: `got` matched against the formula with one rule changed."""
    def near(x):
        return abs(got - x) <= SLACK
    m, g, o = _split(p, d, 0)
    if stage >= 1 and near(expected(p, d, stage - 1)):
        term = TERMS[{1: 2, 2: 1, 3: 0}[stage]]
        return (f"your stage-{stage} value matches stage {stage - 1}: {term} not partitioned "
                f"(stage {stage} divides them by d as well)")
    if stage <= 2 and near(expected(p, d, stage + 1)):
        term = TERMS[{0: 2, 1: 1, 2: 0}[stage]]
        return (f"your stage-{stage} value matches stage {stage + 1}: the {term} are divided by d "
                f"only from stage {stage + 1} on")
    if near((m + g + o) / d):
        return "everything divided by d: only stage 3 partitions all three terms"
    for name, scale in (("8 bytes per parameter (momentum and variance, no fp32 master copy): "
                         "mixed precision keeps an fp32 copy of the weights too, 12 in all",
                         8 / 12),
                        ("the optimizer states in fp16 (6 bytes per parameter): Adam's are fp32, "
                         "12 bytes per parameter", 6 / 12)):
        div = d if stage >= 1 else 1
        rest = expected(p, d, stage) - o / div
        if near(rest + scale * o / div):
            return f"your optimizer term counts {name}"
    if near(8 * expected(p, d, stage)):
        return "your value is 8 x the expected: bits, not bytes?"
    for k, name in ((GiB, "GiB"), (10**9, "GB")):
        if abs(got - expected(p, d, stage) / k) <= 1:
            return f"your value looks like {name}: return bytes"
    return None


def _call(fn, p, d, stage):
    try:
        return fn(p, d, stage), None
    except NotImplementedError:
        raise
    except Exception as exc:        # noqa: BLE001 - the student's code: name what it raised
        return None, f"{type(exc).__name__}: {exc}"


def function_problems(fn, rng: random.Random) -> list[str]:
    for p, d, stage in cases(rng):
        got, err = _call(fn, p, d, stage)
        want = expected(p, d, stage)
        if err or not isinstance(got, numbers.Real) or isinstance(got, bool):
            return [f"model_state_bytes(p={p}, d={d}, stage={stage}) "
                    f"{'raised ' + err if err else f'returned {got!r}, not a number of bytes'}"]
        if abs(got - want) > SLACK:
            m, g, o = _split(p, d, stage)
            hint = diagnose(p, d, stage, got)
            return [f"model_state_bytes(p={p:,}, d={d}, stage={stage}) returned {got:,.0f} bytes, "
                    f"expected {want:,.0f} (parameters {m:,.0f} + gradients {g:,.0f} + optimizer "
                    f"states {o:,.0f})" + (f"; {hint}" if hint else "")]
    return []


def answer_problems(answers: dict, p: int, **act) -> list[str]:
    """What is wrong with each {GiB: smallest d} answer (stage 3, activations included)."""
    def need(d):
        return memory.estimate_zero_memory(p, d=d, z=3, **act).total / GiB
    out = []
    for gib, d in answers.items():
        if not isinstance(d, numbers.Integral) or d < 1:
            out.append(f"{gib} GB GPUs: d must be a whole number of ranks >= 1, not {d!r}")
        elif need(d) > gib:
            out.append(f"{gib} GB GPUs: with d = {d} stage 3 needs {need(d):.1f} GB per GPU: too "
                       "few ranks (did you add the activations? they do not shrink with d)")
        elif d > 1 and need(d - 1) <= gib:
            out.append(f"{gib} GB GPUs: d = {d} fits ({need(d):.1f} GB), but so does d = {d - 1} "
                       f"({need(d - 1):.1f} GB): the smallest d is asked")
    return out


def check(fn=None, d_16gb=None, d_80gb=None, p: int = 10_000_000_000, solution: bool = False,
          seed: int | None = None, **act) -> bool:
    """Check `fn(p, d, stage)` on unseen cases, then the two answers; print the verdict."""
    if solution:
        fn = reference_model_state_bytes
        a_bytes = memory.activation_bytes(**{k: act[k] for k in ("s", "b", "h", "L", "a")},
                                          k_l=act.get("k_l", K_L)) if act.get("L") else 0.0
        d_16gb, d_80gb = (next(d for d in range(1, 4097)
                               if fn(p, d, 3) + a_bytes <= gib * GiB) for gib in (16, 80))
    rng = random.Random(seed)
    try:
        problems = function_problems(fn, rng) if callable(fn) else None
    except NotImplementedError:
        problems = None
    if problems is None:
        return not_yet(EXERCISE, "model_state_bytes still raises NotImplementedError: write it "
                       "and run its cell, then this check", reference=solution).show()
    if problems:
        return wrong(EXERCISE, *problems, reference=solution).show()
    if d_16gb is None or d_80gb is None:
        return not_yet(EXERCISE, "your model_state_bytes matches the formula on "
                       f"{len(cases(random.Random(0)))} unseen cases; now set d_16gb_answer and "
                       "d_80gb_answer with it", reference=solution).show()
    problems = answer_problems({16: d_16gb, 80: d_80gb}, p, **act)
    summary = (f"model_state_bytes matches the formula on {len(cases(random.Random(0)))} unseen "
               f"cases (all stages, d not dividing p), and stage 3 of {p / 1e9:g} B parameters "
               f"fits 16 GB GPUs from d = {d_16gb}, 80 GB GPUs from d = {d_80gb}")
    return from_problems(EXERCISE, problems, summary, reference=solution).show()
