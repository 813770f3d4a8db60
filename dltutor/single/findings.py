"""What notebook 01's runs showed, as sentences built from their numbers (dltutor.core.findings).

    speed(rows)               each knob of `speed.compare_speed` against the set-up it changes
    curves(history, n_test)   how the loss and the test accuracy moved over the epochs
    bottleneck(rows)          which case the speed table was in: the input pipeline or the compute
    batch_sizes(results)      the batch-size exercise: the fastest size, or "inconclusive here"

A throughput's spread is the 95 % confidence interval of the mean img/s of its separately timed
chunks (`core.spread.mean_ci`; a row without one has no interval, nan, and decides nothing); a
test accuracy's is the 95 % binomial half-width on the test images (`core.findings.accuracy_halfwidth`).
"""
from __future__ import annotations

import math

from dltutor.core import env
from dltutor.core.findings import INCONCLUSIVE, accuracy_halfwidth, compare, differs, fmt, trend

ON_DEVICE = "data on device"
NO_WORKERS = "DataLoader, 0 workers"
CHANCE = 0.10   # 10 classes: the accuracy of guessing


def _ci(row: dict) -> float:
    """A row's ± (95 % CI of its mean img/s); nan (no interval, decides nothing) when it has none."""
    v = row.get("spread")
    return math.nan if v is None else float(v)


def _reference(row: dict, rows: list[dict]) -> dict:
    """The set-up a variant changes: 'on device + X' changes 'data on device', the rest row 0."""
    if row["variant"].startswith("on device +"):
        return next((r for r in rows if r["variant"] == ON_DEVICE), rows[0])
    return rows[0]


def speed(rows: list[dict]) -> list[str]:
    """Which variant was fastest, and what each one did against the set-up it changes."""
    measured = [r for r in rows if r.get("img_per_s")]
    if not measured:
        return ["No variant was measured."]
    out = [] if not env.fast_mode() else [
        "FAST MODE: a few timed steps per variant on a tiny model; the spreads are wide."]
    ranked = sorted(measured, key=lambda r: -r["img_per_s"])
    best = ranked[0]
    head = f"Fastest here: {best['variant']} ({fmt(best['img_per_s'], 'img/s')})"
    if len(ranked) > 1:
        second = ranked[1]
        if differs(best["img_per_s"], second["img_per_s"], _ci(best), _ci(second)):
            head += f", ahead of every other variant beyond the spreads (next: {second['variant']})."
        else:
            head += (f", but {second['variant']} ({fmt(second['img_per_s'], 'img/s')}) is inside the "
                     f"spreads: which is fastest is {INCONCLUSIVE}.")
    out.append(head if head.endswith(".") else head + ".")
    for r in measured:
        ref = _reference(r, rows)
        if r is ref or not ref.get("img_per_s"):
            continue
        out.append(compare(r["variant"], r["img_per_s"], ref["variant"], ref["img_per_s"],
                           unit="img/s", spread_a=_ci(r), spread_b=_ci(ref)))
    skipped = [f"{r['variant']}: {r['status']}" for r in rows if not r.get("img_per_s")]
    if skipped:
        out.append("Not measured in this run: " + "; ".join(skipped) + ".")
    return out


def bottleneck(rows: list[dict]) -> str:
    """Which case this run was in, from the speed table's rows: the input pipeline limited it
    (worker processes or the data on the device beat 0 workers beyond the spreads), the model's
    compute did (neither beat it, and at least one was slower beyond the spreads), or neither shows."""
    by_name = {r["variant"]: r for r in rows if r.get("img_per_s")}
    base = by_name.get(NO_WORKERS)
    knobs = [r for name, r in by_name.items()
             if name == ON_DEVICE or (name.startswith("DataLoader,") and name != NO_WORKERS)]
    if base is None or not knobs:
        return ("Which one limited this run, the input pipeline or the model's compute, is not "
                f"known: {NO_WORKERS} or every input-pipeline variant was not measured.")

    def gap(r):    # +1 faster than 0 workers beyond the spreads, -1 slower, 0 inside them
        if not differs(r["img_per_s"], base["img_per_s"], _ci(r), _ci(base)):
            return 0
        return 1 if r["img_per_s"] > base["img_per_s"] else -1

    def said(rs):
        return " and ".join(f"{r['variant']} ({r['img_per_s'] / base['img_per_s']:.2f}x)" for r in rs)
    faster = [r for r in knobs if gap(r) > 0]
    slower = [r for r in knobs if gap(r) < 0]
    if faster:
        return (f"Bottleneck in this run: the input pipeline. {said(faster)} beat {NO_WORKERS} "
                "beyond the spreads, so preparing the batches, not the model, limited the speed.")
    if slower:
        workers = any(r["variant"].startswith("DataLoader,") for r in slower)
        return (f"Bottleneck in this run: the model's compute. {said(slower)} fell behind "
                f"{NO_WORKERS} beyond the spreads and no input-pipeline variant beat it: taking "
                "the batch preparation off the model's path did not help"
                + (", and the worker processes competed with the model for the cores." if workers
                   else "."))
    return (f"Which one limited this run, the input pipeline or the model's compute, is "
            f"{INCONCLUSIVE}: {said(knobs)} against {NO_WORKERS} are inside the spreads.")


def curves(history, n_test: int) -> list[str]:
    """The loss over the epochs, the test accuracy first vs last epoch, and against guessing
    (epochs counted from 1, as in the plot; accuracies in %)."""
    epochs = [e + 1 for e in history.epoch]
    out = [trend("training loss", epochs, history.train_loss, x_name="epoch")]
    first, last = history.test_acc[0], history.test_acc[-1]
    s0, s1 = accuracy_halfwidth(first, n_test), accuracy_halfwidth(last, n_test)
    if len(epochs) > 1:
        out.append(compare(f"test accuracy after epoch {epochs[-1]}", 100 * last,
                           f"after epoch {epochs[0]}", 100 * first, unit="%",
                           spread_a=100 * s1, spread_b=100 * s0))
    out.append(compare("final test accuracy", 100 * last, "guessing", 100 * CHANCE, unit="%",
                       spread_a=100 * s1))
    return out


def batch_sizes(results: dict, spreads: dict | None = None) -> list[str]:
    """The batch-size exercise: {batch size: img/s} (and their spreads) -> the fastest, or a tie."""
    spreads = spreads or {}
    ranked = sorted(results, key=lambda b: -results[b])
    best = ranked[0]
    out = [f"Fastest batch size here: {best} ({fmt(results[best], 'img/s')})."]
    if len(ranked) > 1:
        nxt = ranked[1]
        out.append(compare(f"batch {best}", results[best], f"batch {nxt}", results[nxt], unit="img/s",
                           spread_a=spreads.get(best, math.nan), spread_b=spreads.get(nxt, math.nan)))
    if not spreads:
        out.append("One measurement per size and no spread: rerun it before trusting the order.")
    return out
