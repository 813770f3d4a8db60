"""What notebook 01's runs showed, as sentences built from their numbers (dltutor.core.findings).

    speed(rows)               each knob of `speed.compare_speed` against the set-up it changes
    curves(history, n_test)   how the loss and the test accuracy moved over the epochs
    bottleneck(rows)          the share of a step that preparing the batches took, and so which
                              part limited the run: the input pipeline or the compute
    batch_sizes(results)      the batch-size exercise: the fastest size, or "inconclusive here"
    accuracy_goal(history, n) the final test accuracy and its interval against 90 %
    pieces_needed(gap, ±, n)  how many pieces would decide a gap, if the noise stays as it was

A throughput's spread is the 95 % confidence interval of the mean img/s of its separately timed
chunks (`core.spread.mean_ci`; a row without one has no interval, nan, and decides nothing); a
test accuracy's is the 95 % binomial half-width on the test images (`core.findings.accuracy_halfwidth`).
"""
from __future__ import annotations

import math

from dltutor.core import env
from dltutor.core.findings import INCONCLUSIVE, accuracy_halfwidth, compare, differs, fmt, trend
from dltutor.core.spread import combined

ON_DEVICE = "data on device"
NO_WORKERS = "DataLoader, 0 workers"
CHANCE = 0.10   # 10 classes: the accuracy of guessing
GOAL = 0.90     # the test accuracy full CPU mode trains to on Fashion-MNIST


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
        line = compare(r["variant"], r["img_per_s"], ref["variant"], ref["img_per_s"],
                       unit="img/s", spread_a=_ci(r), spread_b=_ci(ref))
        out.append(line + _needed(r, ref) if INCONCLUSIVE in line else line)
    skipped = [f"{r['variant']}: {r['status']}" for r in rows if not r.get("img_per_s")]
    if skipped:
        out.append("Not measured in this run: " + "; ".join(skipped) + ".")
    return out


def pieces_needed(gap: float, halfwidth: float, pieces: int) -> int | None:
    """Pieces per variant that would bring an interval `halfwidth` (reached over `pieces` pieces)
    under `gap`, if the noise stays as it was: the interval narrows as 1/sqrt(pieces). None when
    there is no gap to resolve or no interval to scale."""
    if not gap or not pieces or math.isnan(halfwidth) or halfwidth <= 0:
        return None
    return max(pieces + 1, math.ceil(pieces * (halfwidth / gap) ** 2 - 1e-9))


def _needed(row: dict, ref: dict) -> str:
    """Why a knob's comparison is not decided, from the run's numbers: the pieces it would take."""
    gap = abs(row["img_per_s"] - ref["img_per_s"])
    n = min(row.get("pieces") or 0, ref.get("pieces") or 0)
    need = pieces_needed(gap, combined(_ci(row), _ci(ref)), n)
    if need is None:
        return ""
    return (f" At this run's noise, telling a gap of {fmt(gap, 'img/s')} apart would take about "
            f"{need:,} pieces per variant instead of {n} ({need / n:.0f}x the timed steps)"
            + (": on this machine the knob's effect is smaller than what its noise lets a notebook "
               "run decide." if need > 4 * n else "."))


def accuracy_goal(history, n_test: int, goal: float = GOAL) -> str:
    """The final test accuracy with its 95 % binomial interval, against `goal` (90 %)."""
    acc = history.test_acc[-1]
    half = accuracy_halfwidth(acc, n_test)
    head = (f"Final test accuracy {100 * acc:.1f} % ± {100 * half:.1f} % (95 % binomial interval on "
            f"{n_test:,} test images) after {len(history.test_acc)} epoch(s)")
    if acc - half > goal:
        return f"{head}: above {goal:.0%}, beyond its interval."
    if acc + half < goal:
        return f"{head}: below {goal:.0%}, beyond its interval."
    return f"{head}: whether it is above {goal:.0%} is {INCONCLUSIVE} (the interval holds {goal:.0%})."


def bottleneck(rows: list[dict]) -> str:
    """Which part of a step the time went to, from the speed table's rows. With 0 workers,
    preparing a batch and computing on it run one after the other, so the data on the device
    (nothing prepared per step) removes the preparation's share of the time per image:
    share = 1 - rate(0 workers) / rate(on device), with its 95 % interval. Above one half the input
    pipeline limited the run, below it the model's compute; an interval across one half decides
    nothing."""
    by_name = {r["variant"]: r for r in rows if r.get("img_per_s")}
    base, dev = by_name.get(NO_WORKERS), by_name.get(ON_DEVICE)
    if base is None or dev is None:
        return ("Which one limited this run, the input pipeline or the model's compute, is not "
                f"known: {NO_WORKERS} or {ON_DEVICE} was not measured.")
    ratio = base["img_per_s"] / dev["img_per_s"]
    share = 1 - ratio
    rel = [_ci(r) / r["img_per_s"] for r in (base, dev)]
    half = ratio * combined(*rel) if not any(math.isnan(x) for x in rel) else math.nan
    took = (f"so preparing the batches took about {share:.0%} of the time per image" if share >= 0
            else "so removing the preparation saved no time in this run")
    head = (f"With {NO_WORKERS} the batches are prepared and computed one after the other; "
            f"{ON_DEVICE} prepares nothing per step and ran {1 / ratio:.2f}x as fast, {took}"
            + (f" (share {share:.0%} ± {half:.0%})" if share < 0 and not math.isnan(half) else
               f" (±{half:.0%})" if not math.isnan(half) else " (no interval)"))
    if math.isnan(half) or abs(share - 0.5) <= half:
        return f"{head}: which part limited this run is {INCONCLUSIVE}."
    if share > 0.5:
        return f"{head}. Bottleneck in this run: the input pipeline."
    cost = ("the data preparation costs something, but it is not the limit" if share - half > 0
             else "whether the data preparation costs anything at all is inside the interval")
    return f"{head}. Bottleneck in this run: the model's compute (the rest of the time); {cost}."


def curves(history, n_test: int) -> list[str]:
    """The loss over the epochs, the test accuracy first vs last epoch, against guessing and
    against 90 % (epochs counted from 1, as in the plot; accuracies in %)."""
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
    return out + [accuracy_goal(history, n_test)]


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
