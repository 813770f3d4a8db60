"""May the α-β model fitted to this run be used? And what notebook 05 prints from it, if so.

A fit whose model is more than USABLE_FOLD (1.5x) too high or too low at one of its own points (the
fold error max(model/measured, measured/model): symmetric, so a model 8x too low reads 8x, not the
88 % of a relative error capped at 100 %) does not describe the run: it is UNUSABLE, and
the predictions built on it (the best algorithm per N and D, the crossovers, the fused bucket) are
not printed; the measured times are, where the run measured them.

- `check(summary, alpha, beta, algorithm="ring")`: {usable, worst, at, bandwidth, top_busbw, line}
- `model_lines(alpha, beta, chk)`: the modelled winner per (N, D) and the ring's crossover with
  recursive doubling, or one line saying why not
- `tie_lines(alpha, beta)`: where the modelled winner leads by under 1 % (a tie, not a win)
- `own_error(summary, name, alpha, beta)`: a fit's largest error on its own points
- `fusion_lines(summary, alpha, beta, chk)`: 1024 separate 4 KiB all-reduces against one fused
  4 MiB bucket: measured (this run's ring, N = its ranks) where it measured those sizes, modelled
  only from a usable fit
"""
from __future__ import annotations

import numpy as np

from dltutor.allreduce import cost
from dltutor.core.findings import fmt
from dltutor.core.units import fmt_bytes

USABLE_FOLD = 1.5   # largest max(model/measured, measured/model) a usable fit may have at its own points
MODEL_NS = (2, 8, 64, 1024)
MODEL_SIZES = [2**k for k in range(10, 31, 4)]
TENSORS, TENSOR_BYTES = 1024, 4 * 2**10   # 1024 gradients of 4 KiB = one 4 MiB bucket


def check(summary: dict, alpha: float, beta: float, algorithm: str = "ring") -> dict:
    """How far the model (alpha, beta) misses `algorithm`'s own measured points, and the verdict."""
    d, _ = cost.times_of(summary, algorithm)
    err = cost.fold(cost.model_folds(summary, algorithm, alpha, beta))
    i = int(err.argmax())
    rows = [r for r in summary["results"] if r["algorithm"] == algorithm]
    top = max((r.get("busbw_GBps") or cost.busbw(r["bytes"], r["time_s"], summary["world_size"]) / 1e9)
              for r in rows)
    out = {"usable": bool(err[i] <= USABLE_FOLD), "worst": float(err[i]), "at": int(d[i]),
           "missed": [(int(x), float(e)) for x, e in zip(d, err) if e > USABLE_FOLD], "points": len(d),
           "bandwidth": (1 / beta / 1e9) if beta > 0 else float("inf"), "top_busbw": float(top),
           "algorithm": algorithm}
    out["line"] = _line(out, alpha)
    return out


def _line(c: dict, alpha: float) -> str:
    bw = (f"1/β = {c['bandwidth']:.3g} GB/s" if c["bandwidth"] != float("inf")
          else "β = 0 (not resolved: a pure-latency fit)")
    fit = f"α = {fmt(alpha * 1e6, 'µs')}, {bw}, and the largest busbw measured is {c['top_busbw']:.3g} GB/s"
    if c["usable"]:
        return (f"the {c['algorithm']}'s minimax α-β fit is usable: within a factor {c['worst']:.2f} of "
                f"every one of its own points (worst at {fmt_bytes(c['at'])}; a fit is usable up to "
                f"{USABLE_FOLD:.2g}x too high or too low); {fit}")
    missed = ", ".join(f"{fmt_bytes(x)} by {e:.2g}x" for x, e in c["missed"])
    return (f"the {c['algorithm']}'s minimax α-β fit is UNUSABLE: it misses {len(c['missed'])} of its own "
            f"{c['points']} points by more than {USABLE_FOLD:.2g}x, too high or too low ({missed}): it does "
            f"not describe this run; {fit}. Nothing is predicted from it below; rerun the sweep (a "
            f"spoiled point is often a busy machine) and look at the measured rows")


def model_lines(alpha: float, beta: float, chk: dict) -> list[str]:
    """The modelled fastest algorithm per (N, D) and the ring / recursive doubling crossover; one
    line instead when the fit is unusable."""
    if not chk["usable"]:
        return [f"no model table: {chk['line'].split(';')[0]}"]
    bw = f"{1 / beta / 1e9:.2f} GB/s" if beta > 0 else "inf (beta not resolved by these sizes)"
    out = [f"model with alpha = {alpha * 1e6:.1f} us, 1/beta = {bw} (fitted above)",
           f"{'N':>5} " + " ".join(f"{fmt_bytes(d):>19}" for d in MODEL_SIZES)]
    for n in MODEL_NS:
        out.append(f"{n:>5} " + " ".join(f"{cost.best_algorithm(n, d, alpha, beta):>19}" for d in MODEL_SIZES))
    for n in MODEL_NS[1:]:
        x = cost.crossover_bytes("ring", "recursive_doubling", n, alpha, beta)
        out.append(f"N = {n}: ring beats recursive doubling above D = {fmt_bytes(x) if x else 'never'}")
    return out + tie_lines(alpha, beta)


TIE = 0.01   # a modelled winner ahead of the runner-up by less than 1 % is a tie no benchmark splits


def tie_lines(alpha: float, beta: float) -> list[str]:
    """Per N: the sizes of the table where the model's winner leads its runner-up by under TIE."""
    out = []
    for n in MODEL_NS:
        ties = []
        for d in MODEL_SIZES:
            (t1, a1), (t2, a2) = sorted((float(cost.model_time(a, n, d, alpha, beta)), a)
                                        for a in cost.ALGORITHMS)[:2]
            if (t2 - t1) / t1 < TIE:
                ties.append(f"{fmt_bytes(d)} ({a1} ahead of {a2} by {(t2 - t1) * 1e6:.3g} us on "
                            f"{t1 * 1e3:.3g} ms, {(t2 - t1) / t1:.2%})")
        if ties:
            out.append(f"N = {n}: effectively a tie (model margin under {TIE:.0%}) at " + "; ".join(ties))
    return out


def own_error(summary: dict, name: str, alpha: float, beta: float) -> float:
    """Largest fold error (max(model/measured, measured/model)) of a fit (`cost.FITS` name) on the
    points it was fitted to."""
    source = cost.FITS[name][0]
    if source != "pingpong":
        return float(cost.fold(cost.model_folds(summary, source, alpha, beta)).max())
    pp = summary.get("pingpong") or []
    return float(cost.fold([(alpha + p["bytes"] * beta) / p["time_s"] for p in pp]).max()) if pp else float("nan")


def _measured(summary: dict, nbytes: int) -> float | None:
    """The run's median-pass ring time (s) at `nbytes`, None where it did not measure that size (the
    median: a fastest pass of a loaded run can be faster at a larger size than at a smaller one)."""
    row = next((r for r in summary["results"] if r["algorithm"] == "ring" and r["bytes"] == nbytes), None)
    return None if row is None else float(np.median(row.get("times_s") or [row["time_s"]]))


def fusion_lines(summary: dict, alpha: float, beta: float, chk: dict, ns=(2, 64)) -> list[str]:
    """1024 separate 4 KiB all-reduces against one fused 4 MiB bucket (ring): measured where this
    run measured both sizes, modelled for each N in `ns` only when the fit is usable."""
    n = summary["world_size"]
    one, fused = _measured(summary, TENSOR_BYTES), _measured(summary, TENSORS * TENSOR_BYTES)
    out = [f"{'N':>4} {'source':<9} {'1024 separate all-reduces':>26} {'one fused 4 MiB bucket':>23} {'speed-up':>9}"]
    if one is not None and fused is not None:
        out.append(_row(n, "measured", TENSORS * one, fused))
        out.append(f"     (the measured row: {TENSORS} x this run's median-pass {fmt_bytes(TENSOR_BYTES)} ring "
                   f"time, not timed as {TENSORS} calls; beside the median-pass {fmt_bytes(TENSORS * TENSOR_BYTES)} time)")
    else:
        have = [f"one {fmt_bytes(b)} ring all-reduce took {t * 1e3:.3g} ms"
                for b, t in ((TENSOR_BYTES, one), (TENSORS * TENSOR_BYTES, fused)) if t is not None]
        missing = [fmt_bytes(b) for b, t in ((TENSOR_BYTES, one), (TENSORS * TENSOR_BYTES, fused)) if t is None]
        out.append(f"{n:>4} measured: " + "; ".join(have + [f"this run did not time {' or '.join(missing)} "
                                                            f"(add {'it' if len(missing) == 1 else 'them'} to SIZES)"]))
    if not chk["usable"]:
        out.append(f"no modelled rows: {chk['line'].split(';')[0]}")
        return out
    for nn in ns:
        out.append(_row(nn, "model", TENSORS * cost.ring_time(nn, TENSOR_BYTES, alpha, beta),
                        cost.ring_time(nn, TENSORS * TENSOR_BYTES, alpha, beta)))
    return out


def _row(n: int, source: str, separate: float, fused: float) -> str:
    return (f"{n:>4} {source:<9} {separate * 1e3:23.1f} ms {fused * 1e3:20.2f} ms "
            f"{separate / fused:8.0f}x")
