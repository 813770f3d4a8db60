"""What notebook 02's runs show, as sentences built from their numbers (`dltutor.core.findings`).

A spread ("±") is the 95 % confidence interval of the mean compared (`dltutor.core.spread`): with
launches in interleaved rounds (`dltutor.ddp.rounds`), over the rounds (an efficiency is taken within
each round); with one launch, over the timed steps of the slowest rank (lab 02's `step_times_ms`,
warm-up already left out), an efficiency's combining those of its two rates; over ranks x profiled
steps for the timeline's terms. A difference inside the spreads is reported as "inconclusive here",
with the rounds a gap of that size would need (`rounds.why_undecided`).

* `step_row(label, metrics)`: one launch as a row: mean step time of the slowest rank, its 95 % CI.
* `scaling(table)`: weak and strong scaling efficiency against 1.0 (ideal), 1/W (no gain) and each other.
* `buckets(rows)`: which bucket setting stepped fastest; whether no overlap beat the lab's buckets
  (`bucket_label`: sizes in MiB; `lab_buckets_note`: the lab's explicit 25 is not DDP's default).
* `lab_agreement(pair)`: lab 02 on W ranks against the one-process sweep (section 3): a verdict,
  agree / differ, on the first steps' losses, where the two must agree.
* `overlap_table(rows)` and `overlap(table)`: the iteration-time model's terms per variant
  (`dltutor.ddp.timeline`) and the overlap fraction.
"""
from __future__ import annotations

from dltutor.core import spread as ci
from dltutor.core.findings import INCONCLUSIVE, against, compare, differs, fmt


def _pm(h: float) -> str:
    """'± 0.12', or '± n/a' where one value gave no interval."""
    return f"± {h:.3f}" if ci.decided(h) else "± n/a"


def slowest(metrics: list[dict]) -> dict:
    """The rank whose timed steps took longest in total (it sets the global img/s)."""
    return max(metrics, key=lambda m: sum(m.get("step_times_ms") or [m.get("step_time_ms") or 0]))


def rate_spread(global_batch: int, step_times_ms) -> float:
    """95 % CI (half-width) of the mean per-step rate global_batch / t (img/s); nan below 2 steps."""
    return ci.mean_ci([1e3 * global_batch / t for t in step_times_ms or [] if t > 0])


def step_row(label: str, metrics: list[dict]) -> dict:
    """A launch of lab 02 as one row: mean step time (ms) of the slowest rank and its 95 % CI."""
    m = slowest(metrics)
    times = m.get("step_times_ms") or [m["step_time_ms"]]
    return {"label": label, "step_time_ms": sum(times) / len(times), "spread_ms": ci.mean_ci(times),
            "timed_steps": len(times), "global_img_per_s": metrics[0]["global_img_per_s"],
            "global_batch": metrics[0].get("global_batch"), "params": metrics[0].get("params"),
            "overlap": metrics[0].get("overlap", True), "bucket_cap_mb": metrics[0].get("bucket_cap_mb"),
            "hardware": m["hardware"]}


# ---------------------------------------------------------------- section 2: scaling efficiency
def _eff_spread(row: dict, base: dict) -> float:
    """± of efficiency = P / (P_base x scale). Measured in interleaved rounds (`ddp.rounds`): the
    95 % CI over the rounds' efficiencies (`efficiency_spread`). One round: the relative CIs of P
    and P_base over steps in quadrature (`core.spread.combined`); nan when either has no interval."""
    if row.get("rounds", 1) >= 2 and "efficiency_spread" in row:
        return row["efficiency_spread"]

    def rel(r):
        h = r.get("rate_spread")
        return float("nan") if h is None else h / r["global_img_per_s"]
    return row["efficiency"] * ci.combined(rel(row), rel(base))


def _against(e: float, de: float, name: str, line: float, rounds: int) -> str:
    """'below' / 'above' `name` `line` beyond the interval, or INCONCLUSIVE with why (from the numbers)."""
    at = f"{name} {line:.1f}" if round(line, 1) == line else f"{name} {line:.2f}"
    if differs(e, line, de):
        return f"{'below' if e < line else 'above'} {at} beyond its 95 % CI"
    from dltutor.ddp.rounds import why_undecided
    return f"{INCONCLUSIVE} against {at} ({why_undecided(e - line, de, rounds)})"


def scaling(table: list[dict]) -> list[str]:
    """Sentences on scaling rows (`ddp.rounds.scaling_rows`, or `scaling.scaling_table` of single
    launches): each efficiency against the ideal 1.0 and against 1 / scale (no gain from the added
    ranks: the speedup is 1), decided when its 95 % CI excludes the line; weak against strong."""
    out, eff = [], {}
    for kind in ("weak", "strong"):
        group = sorted((r for r in table if r["scaling"] == kind), key=lambda r: r["world_size"])
        if len(group) < 2:
            continue
        base = group[0]
        for r in group[1:]:
            e, de, n = r["efficiency"], _eff_spread(r, base), r.get("rounds", 1)
            eff.setdefault(kind, (e, de, r["world_size"]))
            w = r["world_size"] // base["world_size"]
            how = (f"mean of {n} interleaved rounds, ± over rounds" if n >= 2 else
                   "one launch each, ± from the per-step rates (not interleaved)")
            head = (f"{kind} scaling, {r['world_size']} ranks x b={r['per_rank_batch']} ({r['hardware']}): "
                    f"{fmt(r['global_img_per_s'], 'img/s')} vs {w} x {fmt(base['global_img_per_s'], 'img/s')} "
                    f"of {base['world_size']} rank x b={base['per_rank_batch']}, efficiency {e:.2f} {_pm(de)} "
                    f"({how})")
            if not ci.decided(de):
                out.append(f"{head}: {INCONCLUSIVE} whether it falls short of the ideal 1.0 "
                           "(one timed value gives no interval).")
                continue
            ideal, gain = _against(e, de, "the ideal", 1.0, n), _against(e, de, "the no-gain line", 1.0 / w, n)
            gained = (f"{w} ranks were faster than {base['world_size']}" if gain.startswith("above") else
                      f"{w} ranks were slower than {base['world_size']}" if gain.startswith("below") else
                      f"the no-gain line is {w} ranks no faster than {base['world_size']}")
            pooled = r["global_img_per_s"] / (w * base["global_img_per_s"])
            mean_of = (f"; {e:.2f} is the mean of the per-round ratios, the ratio of the mean rates is "
                       f"{pooled:.3f}" if n >= 2 else "")
            out.append(f"{head}: {ideal}; {gain}: {gained}; "
                       f"{r['world_size']} ranks ran at {r['speedup']:.2f}x the throughput of "
                       f"{base['world_size']} (ideal: {w}x){mean_of}.")
    if "weak" in eff and "strong" in eff:
        (ew, dw, _), (es, ds, _) = eff["weak"], eff["strong"]
        out.append(compare("strong-scaling efficiency", es, "weak-scaling efficiency", ew,
                           spread_a=ds, spread_b=dw) + " Both use the same 2-rank launches and differ only "
                   "in their 1-rank baseline (b against 2b), so this compares the two baselines' "
                   "throughputs, not two ways of running the ranks; the ± of each also depends on which "
                   "set-up ran right before the 2-rank launch in each round.")
    return out


# ---------------------------------------------------------------- section 3: the lab against one process
FIRST_STEPS = 10    # the verdict's steps: same weights, images and LR, before differences can grow
LOSS_TOL = 2e-4     # float rounding of one batch of B against W ranks' mean over B / W each


def _parting(a: list, b: list, tol: float):
    """(step counted from 1, |difference|) of the first step whose losses differ by more than `tol`
    (a NaN on either side counts as a difference)."""
    return next(((i + 1, abs(x - y)) for i, (x, y) in enumerate(zip(a, b)) if not abs(x - y) <= tol), None)


def first_steps_verdict(one: list, ranks: list, first: int = FIRST_STEPS, tol: float = LOSS_TOL) -> list[str]:
    """The verdict on the first `first` steps' losses, where the two runs must agree, and where the
    two curves part after them (if they do)."""
    n = min(first, len(one), len(ranks))
    head = (f"Verdict on the first {n} steps' losses, where the two runs must agree (same first weights, "
            f"same images in each global batch, same LR), tolerance ±{tol:g}: ")
    part = _parting(one, ranks, tol)
    if part and part[0] <= n:
        return [head + f"they DIFFER: at step {part[0]} the losses are {part[1]:.2g} apart, so the "
                "ranks did not take the one process's SGD steps."]
    worst = max(abs(x - y) for x, y in zip(one[:n], ranks[:n]))
    lines = [head + f"they AGREE (largest difference {worst:.1g}): the ranks took the one process's SGD steps."]
    m = min(len(one), len(ranks))
    lines.append(f"The loss curves stay within ±{tol:g} for all {m} steps." if not part else
                 f"The loss curves part at step {part[0]} of {m} ({part[1]:.2g} apart): from there on they "
                 "are two different trajectories, so the end-of-budget numbers below compare two runs that "
                 "have split and are no test of the lab.")
    return lines


def lab_agreement(pair: list[dict], loss_tol: float = 1e-3) -> list[str]:
    """`batch_report.compare_with_lab` rows (one process, then the ranks): a verdict on the first
    steps' losses (`first_steps_verdict`), then the end of the budget, loss and test accuracy.

    Float rounding differs between one process and W ranks summing over their shards; `loss_tol`
    is the threshold on the final loss, and the test accuracy may differ by one image per thousand."""
    one, ranks = pair
    src = "the one-process sweep"
    lines = (first_steps_verdict(one["loss_curve"], ranks["loss_curve"])
             if one.get("loss_curve") and ranks.get("loss_curve") else
             ["No per-step loss curves to compare: no verdict on the first steps."])
    lines.append("At the end of the budget: " + against(
        f"final loss of {ranks['run']}", ranks["final_loss"], one["final_loss"], tolerance=loss_tol, source=src))
    if one["test_acc"] is not None and ranks["test_acc"] is not None:
        lines.append(against("test accuracy", ranks["test_acc"], one["test_acc"], tolerance=1e-3, source=src))
    if (one["steps"], one["global_batch"]) != (ranks["steps"], ranks["global_batch"]):
        lines.append(f"not the same run: {ranks['steps']} steps of {ranks['global_batch']} images on the "
                     f"ranks vs {one['steps']} of {one['global_batch']} in one process.")
    return lines


# ---------------------------------------------------------------- section 4: buckets and overlap
LAB_BUCKET_MB = 25   # lab 02's --bucket-cap-mb default, passed to DDP explicitly


def bucket_label(mb: float) -> str:
    """A bucket variant's label: DDP's `bucket_cap_mb` is in MiB (2**20 bytes)."""
    return f"bucket_cap_mb={mb:g} (MiB)"


def lab_buckets_note() -> str:
    """What the lab's explicit bucket_cap_mb=25 is, against DDP's own default (None), read from the
    installed torch (`DistributedDataParallel` keeps a smaller first bucket only when it is None)."""
    import torch
    import torch.distributed as dist
    first = dist._DEFAULT_FIRST_BUCKET_BYTES / 2 ** 20
    return (f"{bucket_label(LAB_BUCKET_MB)} is the lab's setting, not DDP's default: the lab passes "
            f"bucket_cap_mb={LAB_BUCKET_MB} explicitly, so every bucket, the first too, holds up to "
            f"{LAB_BUCKET_MB} MiB; DDP left at bucket_cap_mb=None caps its first bucket at {first:g} MiB "
            f"(torch.distributed._DEFAULT_FIRST_BUCKET_BYTES) and the others at 25 MiB "
            f"(torch {torch.__version__}). That default was not run here.")


def _why(a: dict, b: dict) -> str:
    """Why two variants' step times are not told apart, from the numbers (`rounds.why_undecided`)."""
    from dltutor.ddp.rounds import why_undecided
    n = min(a.get("rounds", 1), b.get("rounds", 1))
    return " Why: " + why_undecided(a["step_time_ms"] - b["step_time_ms"],
                                    ci.combined(a["spread_ms"], b["spread_ms"]), n, " ms") + "."


def one_bucket_note(rows: list[dict]) -> str | None:
    """Which overlapping variants hold every gradient in one bucket (cap >= the model's fp32
    gradients): like no overlap, their one all-reduce starts after backward, so set against no
    overlap they can show no overlap effect."""
    one = [r for r in rows if r.get("overlap", True) and r.get("params") and r.get("bucket_cap_mb")
           and r["bucket_cap_mb"] >= 4 * r["params"] / 2 ** 20]
    if not one:
        return None
    mib = 4 * one[0]["params"] / 2 ** 20
    return (", ".join(r["label"] for r in one) + f" holds all {mib:.1f} MiB of fp32 gradients in one bucket: "
            "like no overlap, its one all-reduce starts after backward, so that pair can show no overlap "
            "effect; the pair that can is the smallest buckets against no overlap.")


def _unpaired(rows: list[dict], by: dict, noov, default: str) -> list[str]:
    """One launch per variant: the fastest against the next, no overlap against the lab's buckets."""
    best, second = rows[0], rows[1]
    gap = differs(best["step_time_ms"], second["step_time_ms"], best["spread_ms"], second["spread_ms"])
    lines = [(f"fastest step here: {best['label']}; " if gap else
              "no variant stepped fastest beyond the run's spread; the two fastest: ") + compare(
        best["label"], best["step_time_ms"], second["label"], second["step_time_ms"], unit="ms",
        spread_a=best["spread_ms"], spread_b=second["spread_ms"]) + ("" if gap else _why(best, second))]
    if noov and default in by:
        d = by[default]
        text = compare("no overlap", noov["step_time_ms"], default, d["step_time_ms"], unit="ms",
                       spread_a=noov["spread_ms"], spread_b=d["spread_ms"])
        if differs(noov["step_time_ms"], d["step_time_ms"], noov["spread_ms"], d["spread_ms"]):
            text += (" Overlap paid off in this run." if noov["step_time_ms"] > d["step_time_ms"] else
                     " In this run no overlap was faster; on a CPU one likely reason is that the all-reduce "
                     "threads need the same cores as backward (the timeline below shows how much was hidden).")
        else:
            text += _why(noov, d)
        lines.append(text)
    return lines


def buckets(rows: list[dict], default: str = bucket_label(LAB_BUCKET_MB)) -> list[str]:
    """Step times of the bucket variants. Over interleaved rounds (`rounds.step_rows`, `rounds` >= 2)
    the verdict is each variant over no overlap (else the lab's buckets) paired within each round
    (`rounds.paired`), the means over rounds only described; one launch each: the fastest against
    the next and no overlap against the lab's buckets, ± over steps. Then which variants hold one
    bucket (`one_bucket_note`) and what the lab's buckets are (`lab_buckets_note`)."""
    from dltutor.ddp.rounds import paired
    rows = sorted(rows, key=lambda r: r["step_time_ms"])
    by = {r["label"]: r for r in rows}
    noov = next((r for r in rows if r["label"].startswith("no overlap")), None)
    n = min(r.get("rounds", 1) for r in rows)
    ref = noov["label"] if noov else default
    pair = paired(rows, ref) if n >= 2 else []
    if pair:
        lines = [f"Mean step time over {n} rounds (± over rounds: the load moved between rounds, so these "
                 "describe, the paired line decides): " + ", ".join(
                     f"{r['label']} {fmt(r['step_time_ms'], 'ms')} ± {fmt(r['spread_ms'], 'ms')}" for r in rows) + "."]
        lines += pair
    else:
        lines = _unpaired(rows, by, noov, default)
    note = one_bucket_note(rows)
    lines += [note] if note else []
    lines.append(f"({rows[0]['hardware']}; " + (
        f"{n} interleaved rounds, each launching every variant once in rotated order; the verdict's unit "
        "is the round.)" if n >= 2 else
        f"one launch per variant, {min(r['timed_steps'] for r in rows)} timed steps each, not "
        "interleaved; ± is the 95 % confidence interval of the mean step time of the slowest rank.)"))
    if default in by:
        lines.append(lab_buckets_note())
    return lines


from dltutor.ddp.overlap_findings import TERMS, contention, overlap, overlap_table  # noqa: E402,F401
