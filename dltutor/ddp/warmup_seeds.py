"""Warm-up or not, decided over seeds: the large-batch study's 'scaled' vs 'scaled+warmup' runs.

One run per batch cannot say whether warm-up helps: at a large scaled LR the same settings end
several points apart from one seed to the next (the weights' start and the order of the images),
and a single difference can take either sign. So every batch with a scaled LR (k > 1) trains both
policies with each of `seeds`, the same seed for both (same first weights, same order of images):

    extra = seed_runs(data, sweep_rows, seeds=(1, 2))   # seed 0's runs come from the sweep
    table = warmup_table(sweep_rows + extra)            # per batch: the paired differences
    warmup_findings(table)                              # the verdict per batch, or why there is none

The verdict per batch is the mean over seeds of (accuracy with warm-up - accuracy without) and the
95 % Student-t interval of that mean (`core.spread.mean_ci`): warm-up helped (or hurt) where the
interval excludes 0, else "inconclusive here" with the seeds that would decide a gap this size.
The runs stop at the budget of epochs (seed 0's warm-up run may go on to the target: its accuracy
is taken at the budget too, as `train_run` records it).
"""
from __future__ import annotations

import math

from dltutor.core import spread as ci
from dltutor.core.findings import INCONCLUSIVE

PAIR = ("scaled", "scaled+warmup")


def seed_runs(data, rows: list[dict], seeds, echo=print) -> list[dict]:
    """`train_run` rows of both `PAIR` policies for every batch with k > 1 in `rows` (the sweep's,
    whose settings they repeat) and each seed in `seeds`; test accuracy at the end of the budget."""
    from dltutor.ddp.batch_study import train_run
    out = []
    for seed in seeds:
        for r in (r for r in rows if r["policy"] == PAIR[1] and r["k"] > 1 and r["seed"] == rows[0]["seed"]):
            for policy in PAIR:
                out.append(train_run(
                    data, r["global_batch"], policy, base_lr=r["base_lr"],
                    base_batch=round(r["global_batch"] / r["k"]), epochs=r["steps"] // r["steps_per_epoch"],
                    warmup_epochs=r["warmup_epochs"], world_size=r["world_size"], width=r["width"],
                    evals_per_epoch=1, seed=seed))
                if echo:
                    echo(f"seed {seed} B={r['global_batch']:5d} {policy:14s} test acc "
                         f"{out[-1]['test_acc']:.3f} ({out[-1]['seconds']:.1f} s)")
    return out


def warmup_table(rows: list[dict]) -> list[dict]:
    """One row per batch with k > 1: the seeds, each seed's difference in test accuracy (points,
    warm-up minus none), their mean and its 95 % CI (`spread`), and both policies' mean accuracy."""
    out = []
    for batch in sorted({r["global_batch"] for r in rows if r.get("k", 1) > 1}):
        acc = {p: {r["seed"]: r["test_acc"] for r in rows if r["global_batch"] == batch and r["policy"] == p}
               for p in PAIR}
        seeds = sorted(set(acc[PAIR[0]]) & set(acc[PAIR[1]]))
        if not seeds:
            continue
        diffs = [100 * (acc[PAIR[1]][s] - acc[PAIR[0]][s]) for s in seeds]
        mine = next(r for r in rows if r["global_batch"] == batch and r["policy"] == PAIR[1])
        out.append({"global_batch": batch, "peak_lr": mine["peak_lr"], "warmup_steps": mine["warmup_steps"],
                    "steps": mine["steps"], "seeds": len(seeds), "diffs": diffs,
                    "warmup_minus_none": sum(diffs) / len(diffs), "spread": ci.mean_ci(diffs),
                    "scaled": sum(acc[PAIR[0]][s] for s in seeds) / len(seeds),
                    "scaled+warmup": sum(acc[PAIR[1]][s] for s in seeds) / len(seeds)})
    return out


def seeds_needed(gap: float, halfwidth: float, n: int) -> int | None:
    """Seeds that would narrow an interval of `halfwidth` (from `n` seeds) below |gap|, the t
    quantile taken at the new count (`ddp.rounds.rounds_needed`)."""
    from dltutor.ddp.rounds import rounds_needed
    return rounds_needed(gap, halfwidth, n)


def verdict(row: dict) -> str:
    """One sentence on one batch's row of `warmup_table`."""
    d, h, n = row["warmup_minus_none"], row["spread"], row["seeds"]
    each = ", ".join(f"{x:+.1f}" for x in row["diffs"])
    head = (f"Warm-up at B={row['global_batch']} (peak LR {row['peak_lr']:.3g}, {row['warmup_steps']} of "
            f"{row['steps']} steps ramped): {d:+.1f} ± {h:.1f} points of test accuracy over {n} seeds"
            if ci.decided(h) else
            f"Warm-up at B={row['global_batch']} (peak LR {row['peak_lr']:.3g}): {d:+.1f} points from "
            f"{n} seed")
    head += f" (each seed: {each})"
    if not ci.decided(h):
        return f"{head}: {INCONCLUSIVE}, one seed gives no interval (full mode runs several)."
    if abs(d) > h:
        return (f"{head}: warm-up {'helped' if d > 0 else 'hurt'} at this batch, beyond the 95 % interval "
                f"of the mean over seeds ({row['scaled']:.1%} without, {row['scaled+warmup']:.1%} with).")
    need = seeds_needed(d, h, n)
    why = (f"the seeds disagree by more than the mean difference ({min(row['diffs']):+.1f} to "
           f"{max(row['diffs']):+.1f} points)" + ("" if need is None else
                                                   f"; about {need} seeds would decide a gap this size"))
    return f"{head}: {INCONCLUSIVE}, the interval covers 0: {why}."


def warmup_findings(table: list[dict]) -> list[str]:
    """The verdict of every batch (`verdict`), smallest batch first."""
    return [verdict(r) for r in table]
