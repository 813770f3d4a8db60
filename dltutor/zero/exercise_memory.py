"""Notebook 04's exercise: the model-state bytes per rank, per ZeRO stage, as a function.

The student writes `model_state_bytes(p, d, stage)`: the bytes of model states one of d ranks
holds when p parameters train in mixed precision with Adam (2p fp16 parameters, 2p fp16
gradients, 12p fp32 master copy + momentum + variance), stage 1 dividing the optimizer states
by d, stage 2 the gradients too, stage 3 the parameters too. Then, with that function and the
activation bytes, the smallest d at which stage 3 fits a 16 GiB and an 80 GiB GPU.

When d does not divide p. The course's formula (`memory.estimate_zero_memory`) divides as real
numbers: a rank's share is p / d elements. DeepSpeed's own estimators truncate each result to
whole bytes (`int(18 * total_params / total_gpus)` in `estimate_zero2_model_states_mem_needs`),
and its partitions are padded so every rank holds ceil(p / d) elements. So a value is right when
it lies between the three terms each rounded down to whole bytes, floor(k p / d), and each
counted on ceil(p / d) elements, k ceil(p / d) (half a byte either side for float rounding).
Floats are accepted (p / d is one), ints too, and numpy or one-element torch numbers
(`dltutor.grading.numbers`); `p // d` is not: d shards of p // d elements leave p % d
parameters out, and every case of the check has a remainder of at least d / 2 so that this
shows. A float32 (7 digits) or int32 result is named when it is what made the value wrong.

`check(fn, d_16gb, d_80gb, p, **act)` calls `fn` on cases drawn at random per check (a small
model and three of up to 10^12 parameters, d from 2 to 64 never dividing p, every stage, and
d = 1), names the first case outside that range (and which rule looks broken, when it can tell),
then checks the two answers (whole numbers) against `memory.smallest_fitting_d`'s rule.
"""
from __future__ import annotations

import random

from dltutor.core.units import GiB
from dltutor.grading.numbers import as_float, as_int, kind
from dltutor.grading.verdict import from_problems, not_yet, wrong
from dltutor.zero import memory

EXERCISE = "04-memory"
K_L, K_H = 2, 4            # fp16 parameters and gradients, fp32 Adam
ROUNDING = 0.5             # bytes of float rounding allowed beyond the accepted range
SLACK = 16                 # bytes: how near a value must be to a mistaken formula to name it
TERMS = ("parameters", "gradients", "optimizer states")
N_CASES = 20               # len(cases(...)): 4 models x (4 stages + d = 1)


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


def _divisors(d: int, stage: int) -> list[tuple[int, int]]:
    """(bytes per parameter, divisor) of the three terms at this stage."""
    return [(K_L, d if stage >= 3 else 1), (K_L, d if stage >= 2 else 1),
            (3 * K_H, d if stage >= 1 else 1)]


def accepted(p: int, d: int, stage: int) -> tuple[int, int]:
    """(lowest, highest) right value: each term rounded down to whole bytes .. each term on
    ceil(p / d) elements (DeepSpeed's padded partitions)."""
    terms = _divisors(d, stage)
    return sum(k * p // q for k, q in terms), sum(k * -(-p // q) for k, q in terms)


def cases(rng: random.Random, n_models: int = 3) -> list[tuple[int, int, int]]:
    """(p, d, stage): every stage for n_models models of 10^6..10^12 parameters and a small one
    of 10^2..10^4, each with a d that leaves a remainder of at least d / 2; and each model on
    d = 1 at some stage."""
    out = []
    for lo, hi in [(10**6, 10**12)] * n_models + [(100, 10**4)]:
        d = rng.randrange(2, 65)
        p = rng.randrange(lo, hi)
        p += rng.randrange(-(-d // 2), d) - p % d      # remainder in [ceil(d/2), d)
        out += [(p, d, stage) for stage in range(4)] + [(p, 1, rng.randrange(4))]
    return out


def _low_precision(got) -> str | None:
    dtype = getattr(got, "dtype", None)
    size = getattr(dtype, "itemsize", 8)
    return str(dtype).replace("torch.", "") if dtype is not None and size < 8 else None


def diagnose(p: int, d: int, stage: int, got: float, raw=None) -> str | None:
    """Which rule looks broken: `got` matched against the formula with one rule changed."""
    def near(x):
        return abs(got - x) <= SLACK
    want = expected(p, d, stage)
    low = _low_precision(raw)
    if low and (abs(got - want) <= 1e-6 * want + SLACK or "int" in low and want >= 2**31):
        return (f"your value is {'an' if low[0] in 'aeiou' else 'a'} {low}, which cannot hold such byte counts exactly (float32 "
                "keeps 7 digits, int32 stops at 2^31): compute with Python ints or floats")
    floors = sum(k * (p // q) for k, q in _divisors(d, stage))
    if got < accepted(p, d, stage)[0] and got >= floors - SLACK:
        return (f"rounded down: d shards of p // d = {p // d:,} elements hold {d * (p // d):,} "
                f"of the p = {p:,} parameters; a rank's share is p / d (or rounded up)")
    if stage >= 1 and near(expected(p, d, stage - 1)):
        term = TERMS[{1: 2, 2: 1, 3: 0}[stage]]
        return (f"your stage-{stage} value matches stage {stage - 1}: {term} not partitioned "
                f"(stage {stage} divides them by d as well)")
    if stage <= 2 and near(expected(p, d, stage + 1)):
        term = TERMS[{0: 2, 1: 1, 2: 0}[stage]]
        return (f"your stage-{stage} value matches stage {stage + 1}: the {term} are divided by d "
                f"only from stage {stage + 1} on")
    m, g, o = _split(p, d, 0)
    if near((m + g + o) / d):
        return "everything divided by d: only stage 3 partitions all three terms"
    for name, scale in (("8 bytes per parameter (momentum and variance, no fp32 master copy): "
                         "mixed precision keeps an fp32 copy of the weights too, 12 in all",
                         8 / 12),
                        ("the optimizer states in fp16 (6 bytes per parameter): Adam's are fp32, "
                         "12 bytes per parameter", 6 / 12)):
        div = d if stage >= 1 else 1
        if near(want - o / div + scale * o / div):
            return f"your optimizer term counts {name}"
    if near(8 * want):
        return "your value is 8 x the expected: bits, not bytes?"
    for k, name in ((GiB, "GiB"), (10**9, "GB")):
        if abs(got - want / k) <= 1:
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
        raw, err = _call(fn, p, d, stage)
        got = None if err else as_float(raw)
        call = f"model_state_bytes(p={p:,}, d={d}, stage={stage})"
        if got is None:
            return [f"{call} " + (f"raised {err}" if err else
                                  f"returned {kind(raw)}, not a number of bytes")]
        lo, hi = accepted(p, d, stage)
        if not lo - ROUNDING <= got <= hi + ROUNDING:    # the expected bytes are not shown
            hint = diagnose(p, d, stage, got, raw) or (
                f"too {'large' if got > hi else 'small'}: check each term's bytes per parameter "
                "(2, 2 and 12) and the stage from which it is divided by d")
            return [f"{call} returned {got:,.2f} bytes, not the model states of one rank; {hint}"]
    return []


def answer_problems(answers: dict, p: int, **act) -> list[str]:
    """What is wrong with each {GiB: smallest d} answer (stage 3, activations included)."""
    def need(d):
        return memory.estimate_zero_memory(p, d=d, z=3, **act).total / GiB
    out = []
    for gib, raw in answers.items():
        d = as_int(raw)
        if d is None or d < 1:
            what = ("a float: count ranks with ints (// or int())" if as_float(raw) is not None
                    and d is None else "not a whole number of ranks >= 1")
            out.append(f"{gib} GiB GPUs: your answer is {kind(raw)}, {what}")
        elif need(d) > gib:
            out.append(f"{gib} GiB GPUs: with d = {d} stage 3 needs {need(d):.1f} GiB per GPU: "
                       "too few ranks (did you add the activations? they do not shrink with d)")
        elif d > 1 and need(d - 1) <= gib:    # never name the smaller d: it is the answer
            out.append(f"{gib} GiB GPUs: d = {d} fits ({need(d):.1f} GiB), but a smaller d also "
                       "fits: the smallest d is asked")
    return out


def _solution_answers(p: int, act: dict) -> tuple[int, int]:
    a_bytes = memory.activation_bytes(**{k: act[k] for k in ("s", "b", "h", "L", "a")},
                                      k_l=act.get("k_l", K_L)) if act.get("L") else 0.0
    return tuple(next(d for d in range(1, 4097)
                      if reference_model_state_bytes(p, d, 3) + a_bytes <= gib * GiB)
                 for gib in (16, 80))


def check(fn=None, d_16gb=None, d_80gb=None, p: int = 10_000_000_000, solution: bool = False,
          seed: int | None = None, **act) -> bool:
    """Check `fn(p, d, stage)` on unseen cases, then the two answers; print the verdict."""
    if solution:
        fn = reference_model_state_bytes
        d_16gb, d_80gb = _solution_answers(p, act)
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
        return not_yet(EXERCISE, f"your model_state_bytes matches the formula on {N_CASES} "
                       "unseen cases; now set d_16gb_answer and d_80gb_answer with it",
                       reference=solution).show()
    problems = answer_problems({16: d_16gb, 80: d_80gb}, p, **act)
    summary = (f"model_state_bytes matches the formula on {N_CASES} unseen cases (all stages, "
               f"d not dividing p), and stage 3 of {p / 1e9:g} B parameters fits 16 GiB GPUs "
               f"from d = {d_16gb}, 80 GiB GPUs from d = {d_80gb}")
    return from_problems(EXERCISE, problems, summary, reference=solution).show()
