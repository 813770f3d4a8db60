"""Notebook 04's ZeRO-1 exercise, judged in the kernel from what the ranks reported.

For each of the check's two models (`exercise_zero1_ranks.run_seeds`): every rank's flat parameters
after every step against one process running torch.optim.Adam on the whole global batch (within
TOLERANCE), and each rank's Adam state against that process's: its bytes (about half), and its
exp_avg, which must equal one process's exp_avg on one contiguous slice of the flat vector (zeros
past the end allowed: a padded last shard), the ranks' slices covering every element once.

Mistakes it names: parameters never updated, updates that lag a step (stale shards gathered),
shards not all-gathered, gradients not all-reduced or summed instead of averaged, shards with a
gap or an overlap, full Adam state on a rank, Adam state in a lower precision.
"""
from __future__ import annotations

import functools

import torch
from torch import nn

from dltutor.zero import exercise_zero1_ranks as ex

STATE_SHARE = (0.45, 0.55)         # a rank's Adam bytes / one process's (step counters aside)


def where(model: nn.Module, lo: int, hi: int) -> str:
    """Flat elements [lo, hi) as parameter names, e.g. '0.weight[28:30], 0.bias'."""
    out, at = [], 0
    for name, p in model.named_parameters():
        a, b = max(lo, at), min(hi, at + p.numel())
        if a < b:
            out.append(name if (a, b) == (at, at + p.numel()) else f"{name}[{a - at}:{b - at}]")
        at += p.numel()
    return ", ".join(out)


@functools.lru_cache(maxsize=8)
def reference(seed: int):
    """One process, torch.optim.Adam on the global batch: flat parameters after each step, the
    bytes of its Adam state, its flat exp_avg after the last step."""
    model = ex.build_model(seed)
    opt = ex.adam(model.parameters())
    after = []
    for step in range(1, ex.STEPS + 1):
        x, y = ex.global_batch(seed, step)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        after.append(ex.flat(model))
    exp_avg = torch.cat([opt.state[p]["exp_avg"].reshape(-1) for p in model.parameters()])
    return after, ex.state_bytes([opt])[0], exp_avg


@functools.lru_cache(maxsize=8)
def mistaken(seed: int, combine: str, first: str = "ceil") -> list[torch.Tensor]:
    """The ranks' common trajectory when the gradients are `combine`d wrongly: 'local' (no
    all-reduce: each shard stepped with its own rank's gradient, rank 0's shard the larger
    (`first`='ceil') or the smaller ('floor') of an uneven split) or 'sum' (not divided)."""
    model = ex.build_model(seed)
    w = ex.flat(model).clone()
    opt, after = ex.adam([w]), []
    for step in range(1, ex.STEPS + 1):
        grads = []
        for r in range(ex.NPROC):
            torch.nn.utils.vector_to_parameters(w, model.parameters())
            model.zero_grad()
            x, y = ex.rank_batch(seed, step, r)
            nn.functional.mse_loss(model(x), y).backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
        if combine == "sum":
            w.grad = sum(grads)
        else:
            cut = w.numel() // ex.NPROC + (first == "ceil")      # 2 ranks, an odd count
            w.grad = torch.cat([grads[0][:cut], grads[1][cut:]])
        opt.step()
        after.append(w.detach().clone())
    return after


def _runs(mask: torch.Tensor) -> list[tuple[int, int]]:
    """The [lo, hi) runs of True in a 1-D mask."""
    out = []
    for i in mask.nonzero().flatten().tolist():
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return out


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool((a - b).abs().max() <= ex.TOLERANCE)


def _differences(got, want, model) -> list[str]:
    lines, n = [], want.numel()
    for r, g in enumerate(got):
        d = (g - want).abs()
        k = int(d.argmax())
        lines.append(f"rank {r}: {int((d > ex.TOLERANCE).sum())} of {n} elements differ; the "
                     f"most at {where(model, k, k + 1)} (flat element {k}): {g[k].item():.6g}, "
                     f"one-process Adam gives {want[k].item():.6g}, |difference| "
                     f"{d.max().item():.2e}" if d.max() > ex.TOLERANCE else
                     f"rank {r}: matches one-process Adam")
    return lines


def _param_problems(reports: list[list[dict]], seed: int) -> list[str]:
    model, (ref, _, _) = ex.build_model(seed), reference(seed)
    init, n = ex.flat(model), ref[0].numel()
    got = [[torch.tensor(m["params"], dtype=torch.float64) for m in rep] for rep in reports]
    if any(g.numel() != n for rep in got for g in rep):
        return [f"rank(s) report {sorted({g.numel() for rep in got for g in rep})} parameters, "
                f"the model has {n}"]
    if all(_close(g[s], ref[s]) for g in got for s in range(ex.STEPS)):
        return []
    if all(_close(g[0], init) and _close(g[1], ref[0]) for g in got):
        return ["the parameters lag a step: unchanged after step 1, one-process Adam's step 1 "
                "after step 2: the all-gather carried stale shards; gather the shards after "
                "optimizer.step(), from the tensor Adam updated"]
    for s in range(ex.STEPS):
        now = [g[s] for g in got]
        if all(_close(g, ref[s]) for g in now):
            continue
        before = [init] * ex.NPROC if s == 0 else [g[s - 1] for g in got]
        moved = [(g != b) for g, b in zip(now, before)]
        return [f"after step {s + 1} of {ex.STEPS}:"] + _step_problems(
            model, seed, s, now, moved, ref[s])
    return []


_LOCAL = ("the gradients were not all-reduced: each rank stepped its shard with the gradient of "
          "its own half-batch (all_reduce the flat gradient, then divide by world_size)")
_SUM = (f"the gradients were summed, not averaged: divide the all-reduced gradient by world_size "
        f"({ex.NPROC})")


def _step_problems(model, seed, s, got, moved, want) -> list[str]:
    n = want.numel()
    if not any(m.any() for m in moved):
        return ["no rank's parameters changed: no update reached the model (the all-gather "
                "carried values Adam never updated, or nothing was copied back: step Adam on "
                "the shard, then copy the gathered shards into the parameters)"]
    if any(not m.all() for m in moved) and any((m != moved[0]).any() for m in moved):
        lines = [f"rank {r} updated only {where(model, *_runs(m)[0])} (flat {_runs(m)[0][0]}:"
                 f"{_runs(m)[0][1]}, its shard); {', '.join(where(model, *g) for g in _runs(~m))}"
                 " kept the old values: all-gather the shards into every rank's parameters "
                 "after the step" for r, m in enumerate(moved) if len(_runs(m)) == 1
                 and not m.all()]
        if lines:
            return lines
    for combine, first, hint in (("local", "ceil", _LOCAL), ("local", "floor", _LOCAL),
                                 ("sum", "ceil", _SUM)):
        if all(_close(g, mistaken(seed, combine, first)[s]) for g in got):
            return [hint]
    right = torch.stack([(g - want).abs() <= ex.TOLERANCE for g in got])
    nowhere, everywhere = ~right.any(0), right.all(0)
    if len(_runs(nowhere)) == 1 and everywhere.any() and (nowhere | everywhere).all():
        a, b = _runs(nowhere)[0]
        return [f"no rank has the right values of {where(model, a, b)} (flat {a}:{b}), the "
                "rest is right on every rank: no shard holds them; the shards must cover all "
                f"{n} elements (an uneven split: the last rank takes what is left)"]
    return _differences(got, want, model)


def _locate(t: torch.Tensor, ref: torch.Tensor) -> tuple[int, int] | None:
    """The slice [lo, hi) of one process's flat exp_avg that a rank's exp_avg `t` equals (any
    elements of `t` past the end of the flat vector must be zeros: padding)."""
    n = ref.numel()
    for lo in range(n):
        k = min(t.numel(), n - lo)
        if _close(t[:k], ref[lo:lo + k]) and not t[k:].any():
            return lo, lo + k
    return None


def _coverage_problems(reports, seed, params_right: bool) -> list[str]:
    model, (_, _, ref) = ex.build_model(seed), reference(seed)
    n, count = ref.numel(), torch.zeros(ref.numel(), dtype=torch.int64)
    for r, rep in enumerate(reports):
        for values in rep[-1].get("exp_avg", []):
            t = torch.tensor(values, dtype=torch.float64)
            span = _locate(t, ref) if t.numel() else (0, 0)
            if span is None:           # wrong gradients also give another exp_avg: said above
                return [] if not params_right else [
                    f"rank {r} keeps Adam state ({t.numel()} elements of exp_avg) equal to one "
                    "process's on no slice of the flat parameters: build Adam on your shard of "
                    "the flat vector and give it that slice of the averaged gradient"]
            count[span[0]:span[1]] += 1
    out = [f"the shards overlap: Adam state for {where(model, a, b)} (flat {a}:{b}) is kept on "
           "more than one rank; each element belongs to exactly one rank's shard"
           for a, b in _runs(count > 1)]
    out += [f"no rank keeps Adam state for {where(model, a, b)} (flat {a}:{b}): the shards must "
            f"cover all {n} elements (an uneven split: the last rank takes what is left)"
            for a, b in _runs(count == 0)]
    return out


def _state_problems(reports, seed) -> tuple[list[str], list[float]]:
    _, full, ref = reference(seed)
    n = ref.numel()
    shares = [rep[-1]["state_bytes"] / full for rep in reports]
    lo, hi = STATE_SHARE
    out = []
    for r, share in enumerate(shares):
        last = reports[r][-1]
        if lo <= share <= hi:
            continue
        if lo <= last["state_elems"] / n <= hi and last.get("dtypes"):
            out.append(f"rank {r} keeps Adam's state in {', '.join(last['dtypes'])}: keep the "
                       "shard in the parameters' dtype (float64), as Adam's fp32 master copy "
                       "is never less precise than the parameters")
            continue
        what = ("keep only your shard" if share > hi else
                f"its shard holds {last['state_elems']} of the {n} elements; the {ex.NPROC} "
                f"shards together must cover all {n}" if share > 0 else
                "keep Adam's state for your shard in a torch.optim.Adam (adam([shard]))")
        out.append(f"rank {r} holds {100 * share:.0f} % of the Adam state of one process "
                   f"({last['state_bytes']} of {full} bytes of exp_avg and exp_avg_sq): {what}")
    return out, shares


def _reports(metrics, seed: int) -> list[list[dict]]:
    return [[m for m in metrics if m.get("event") == "zero1_step" and m.get("rank") == r
             and m.get("seed") == seed] for r in range(ex.NPROC)]


def judge(metrics: list[dict], seed: int) -> tuple[list[str], str]:
    """(problems, summary) of the check's run with `seed`."""
    seeds = ex.run_seeds(seed)
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return [f"rank {e['rank']} failed in step {e['step']} of model "
                f"{seeds.index(e['seed']) + 1 if e.get('seed') in seeds else '?'}: {e['error']}"
                for e in errors], ""
    all_reports = [_reports(metrics, s) for s in seeds]
    steps = list(range(1, ex.STEPS + 1))
    stray = [m for m in metrics if m.get("event") == "zero1_step" and m.get("seed") not in seeds]
    if stray or any([m["step"] for m in rep] != steps for reps in all_reports for rep in reps):
        return [f"not every rank reported steps 1..{ex.STEPS} of both models of this check's run "
                f"(seeds {seeds[0]} and {seeds[1]}): end the script with run(Zero1) and report "
                "nothing else"], ""
    shares, sizes = [], []
    for i, (s, reports) in enumerate(zip(seeds, all_reports)):
        n = ex.flat(ex.build_model(s)).numel()
        params = _param_problems(reports, s)
        state, share = _state_problems(reports, s)
        coverage = [] if state else _coverage_problems(reports, s, not params)
        if params or state or coverage:
            return [f"model {i + 1} of {len(seeds)} ({n} parameters, split over {ex.NPROC} "
                    "ranks):", *state, *coverage, *params], ""
        shares.append(share)
        sizes.append(n)
    summary = (f"on {ex.NPROC} ranks, two models ({sizes[0]} and {sizes[1]} parameters, drawn "
               f"per check) match one process's torch.optim.Adam after each of {ex.STEPS} steps "
               f"on every rank (within {ex.TOLERANCE:g}); each rank keeps Adam state for its own "
               f"shard only ({' and '.join(f'{100 * x:.0f} %' for x in shares[0])} of one "
               "process's), and the shards cover every element once")
    return [], summary
