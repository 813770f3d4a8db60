"""The kernel's side of the `06-tensor-parallel` check (see `exercise_tp` for what the ranks
report): each rank's output, input gradient and slice gradients against the one-process MLP
(`exercise_tp.reference`), and its all-reduces, with the known mistakes named.

`judge_against(metrics, ref, world)` returns (problems, summary). Named: b2 added on every rank (or
b2 / world_size) before the all-reduce, b2 added on one rank only, a rank's output that is only
its partial sum, the hidden activations all-reduced, an input gradient never all-reduced or
all-reduced twice (the all-reduce in g's backward, or a differentiable all-reduce as g), the
right numbers with no communication, a weight used untransposed, ranks that made different
all-reduces (the cause of a hang, before the timeouts it caused).
"""
from __future__ import annotations

from dltutor.grading import ranks
from dltutor.launch.results import lost_peer
TOL = 1e-6
NAMES = {"w1": "W1 rows", "b1": "b1 slice", "w2": "W2 columns", "b2": "b2"}


def part(rows: int, rank: int, world: int) -> slice:
    """Rank `rank`'s share of `rows` rows (hidden units), in order."""
    n = rows // world
    return slice(rank * n, (rank + 1) * n)


def _close(a, b) -> bool:
    """Equal within TOL; `b` may broadcast (a bias) but not widen `a`."""
    try:
        return a.shape == (a - b).shape and float((a - b).abs().max()) <= TOL
    except RuntimeError:        # shapes that do not broadcast
        return False


def _hidden_reduced(calls: list, ref: dict, world: int) -> bool:
    tokens, _, hidden = ref["dims"]
    return any(c["phase"] == "forward" and c.get("shape") == [tokens, hidden // world]
               for c in calls)


def _output_problem(r: int, got, ref: dict, world: int, calls: list) -> str | None:
    diff = float((got - ref["out"]).abs().max())
    if diff <= TOL:
        return None
    head = f"rank {r}, output: max |difference| {diff:.3g} from the one-process MLP"
    if _close(got - ref["out"], ref["b2"] * (world - 1)):
        why = ("off by exactly b2 x (world_size - 1): b2 added on every rank before the "
               "all-reduce: add it once, after")
    elif _close(got, ref["partial"][r] + ref["b2"]) or _close(got, ref["partial"][r]):
        why = (f"rank {r}'s output is only its partial sum: all-reduce the partial outputs "
               "(Megatron's g) before adding b2")
    elif _close(got - ref["b2"], (ref["out"] - ref["b2"]) * world):
        why = f"{world} times the output: the partial sums were added more than once"
    elif _hidden_reduced(calls, ref, world):
        return head        # the all-reduce of the hidden activations, named by _calls_problem
    else:
        why = ("not a known slip: check column-parallel (W1 rows, b1 slice), GeLU on the "
               "slice, row-parallel (W2 columns), the all-reduce, then b2")
    return f"{head}: {why}"


def _x_grad_problem(r: int, got, ref: dict, world: int) -> str | None:
    if got is None:
        return f"rank {r}, input gradient: x got none: compute with the x you were given"
    diff = float((got - ref["x_grad"]).abs().max())
    if diff <= TOL:
        return None
    head = f"rank {r}, input gradient: max |difference| {diff:.3g} from the one-process MLP"
    if _close(got, ref["partial_x_grad"][r]):
        return (f"{head}: it is only rank {r}'s part: the backward of f: all-reduce the input "
                "gradient")
    if _close(got, ref["partial_x_grad"][r] * world):
        return (f"{head}: it is rank {r}'s part, {world} times: the backward all-reduce ran in g "
                "(at the output), not in f: g's backward is the identity, f's backward "
                "all-reduces the input gradient")
    if _close(got, ref["x_grad"] * world):
        return (f"{head}: {world} times too large: the gradient was all-reduced twice (g's "
                "backward is the identity; only f's backward all-reduces)")
    return head


def _b2_problem(r: int, got, expected, world: int, others_have_it: bool) -> str | None:
    if got is None and others_have_it:
        return (f"rank {r}, b2 gradient: none: b2 was added on another rank only; b2 is "
                "replicated, so every rank adds its copy (once, after the all-reduce) and every "
                "copy gets the whole gradient")
    if got is not None and _close(got, expected / world):
        return (f"rank {r}, b2 gradient: 1/{world} of the one-process gradient: b2 / world_size "
                "added before the all-reduce gives the right output, but each copy of b2 learns "
                f"{world} times too slowly: add b2 once, after the all-reduce")
    return None


def _grad_problems(r: int, grads: dict, ref: dict, world: int, b2_somewhere: bool) -> list[str]:
    import torch
    out = []
    s = part(ref["dims"][2], r, world)
    want = {"w1": ref["grads"]["w1"][s], "b1": ref["grads"]["b1"][s],
            "w2": ref["grads"]["w2"][:, s], "b2": ref["grads"]["b2"]}
    where = {"w1": f"rows {s.start}..{s.stop - 1}", "b1": f"elements {s.start}..{s.stop - 1}",
             "w2": f"columns {s.start}..{s.stop - 1}", "b2": "all of it"}
    for k, expected in want.items():
        got = None if grads.get(k) is None else torch.tensor(grads[k], dtype=torch.float64)
        named = _b2_problem(r, got, expected, world, b2_somewhere) if k == "b2" else None
        if named:
            out.append(named)
            continue
        if got is None:
            out.append(f"rank {r}, {NAMES[k]} gradient: none: compute with the tensors you were "
                       "given (they require grad), not copies")
            continue
        diff = float((got - expected).abs().max()) if got.shape == expected.shape else float("inf")
        if diff > TOL:
            times = (f": {world} times the gradient (g's backward must be the identity)"
                     if _close(got, expected * world) else "")
            out.append(f"rank {r}, {NAMES[k]} gradient: max |difference| {diff:.3g} from the "
                       f"one-process gradient's {where[k]}{times}")
    return out


def _calls_problem(r: int, calls: list, ref: dict, world: int, numbers_right: bool) -> str | None:
    tokens, d_model, hidden = ref["dims"]
    shape = [tokens, d_model]
    fwd = [c.get("shape") for c in calls if c["phase"] == "forward"]
    bwd = [c.get("shape") for c in calls if c["phase"] == "backward"]
    if fwd == [shape] and bwd == [shape]:
        return None
    seen = (f"rank {r} made {len(fwd)} all-reduce(s) in the forward {fwd} and {len(bwd)} in the "
            f"backward {bwd}; Megatron makes exactly one each way, of a {tokens} x {d_model} "
            "tensor (g: the partial outputs; f: the input gradient)")
    if _hidden_reduced(calls, ref, world):
        seen += (f": the {tokens} x {hidden // world} hidden activations were all-reduced, but "
                 "the column-parallel layer's output stays split (each rank's hidden units are "
                 "its own, GeLU runs on its slice); only the row-parallel layer's partial outputs "
                 "are summed")
    if numbers_right and not calls:
        seen += (": the right numbers without any communication mean the work was not split "
                 "(each rank was given only its slices)")
    return seen


def _mismatch(records: list[dict]) -> str | None:
    """When the ranks made different all-reduces: say so (a collective pairs with whatever the
    other rank calls next, or waits for it until the timeout)."""
    seqs = {m["rank"]: [f"{c['phase']} {'x'.join(map(str, c.get('shape', [])))}"
                        for c in m.get("calls", [])] for m in records}
    if len({tuple(v) for v in seqs.values()}) <= 1:
        return None
    made = "; ".join(f"rank {r}: {v or 'none'}" for r, v in sorted(seqs.items()))
    return (f"the ranks made different all-reduces ({made}): every rank must make the same "
            "all-reduces in the same order, or one waits for the other until the timeout (or "
            "adds up the wrong tensors)")


def _error_problems(errors: list[dict], ref: dict, world: int, records: list) -> list[str]:
    """The first error in time (the cause) first, then what it caused on the other ranks."""
    tokens, d_model, hidden = ref["dims"]
    errors = ranks.in_time_order(errors)
    out = []
    for i, e in enumerate(errors):
        line = f"rank {e['rank']} failed in the {e.get('phase') or 'setup'}: {e['error']}"
        if "cannot be multiplied" in e["error"] or "size of tensor" in e["error"]:
            line += (f" -- w1 is this rank's rows of W1 ({hidden // world} x {d_model}, stored "
                     f"as nn.Linear stores a weight: out x in) and w2 its columns of W2 "
                     f"({d_model} x {hidden // world}): multiply by their transposes")
        if i and lost_peer(e["error"]):
            line += " (a consequence: it waited for the rank above)"
        out.append(line)
    mismatch = _mismatch(records)
    if mismatch and all(lost_peer(e["error"]) for e in errors):
        return [mismatch, *out]             # the ranks only waited: the mismatch is the cause
    return out + ([mismatch] if mismatch else [])


def judge_against(metrics: list[dict], ref: dict, world: int) -> tuple[list[str], str]:
    """(problems, summary): every rank's output, gradients and all-reduces against `ref`."""
    import torch
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return _error_problems(errors, ref, world, metrics), ""
    reports = sorted((m for m in metrics if m.get("event") == "tp_mlp"), key=lambda m: m["rank"])
    if [m["rank"] for m in reports] != list(range(world)):
        return [f"rank(s) {[m['rank'] for m in reports]} of {world} reported (once each) through "
                "run(tp_mlp): keep the last line of the script"], ""
    b2_somewhere = any(m["grads"].get("b2") is not None for m in reports)
    problems = []
    for m in reports:
        r = m["rank"]
        numeric = [_output_problem(r, torch.tensor(m["out"], dtype=torch.float64), ref, world,
                                   m["calls"]),
                   _x_grad_problem(r, None if m["x_grad"] is None else
                                   torch.tensor(m["x_grad"], dtype=torch.float64), ref, world),
                   *_grad_problems(r, m["grads"], ref, world, b2_somewhere)]
        numeric = [p for p in numeric if p]
        calls = _calls_problem(r, m["calls"], ref, world, not numeric)
        first = _hidden_reduced(m["calls"], ref, world)       # the cause, before its effects
        problems += ([calls] if calls and first else []) + numeric + (
            [calls] if calls and not first else [])
    errs = max(float((torch.tensor(m["out"], dtype=torch.float64) - ref["out"]).abs().max())
               for m in reports)
    tokens, d_model, hidden = ref["dims"]
    return problems, (f"on {world} ranks (tokens {tokens}, d_model {d_model}, hidden {hidden}), "
                      f"output and input gradient match the one-process MLP (max output error "
                      f"{errs:.1e}), every rank's W1/b1/W2/b2 slice gradient matches its slice "
                      f"of the full gradient, and each rank made one all-reduce of {tokens} x "
                      f"{d_model} forward (g) and one backward (f)")
