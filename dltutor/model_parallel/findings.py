"""What notebook 06's runs showed, in sentences built from their numbers (dltutor.core.findings).

* `tp(rows)`: the TP checks (errors relative to the whole block's largest value, against the fp32
  tolerance), all-reduces counted beside Megatron's one per block and direction, the reduced
  tensor's size beside the formula, and the timings: one process alone vs t ranks, alternated,
  compared by the paired interval of the pairs' differences;
* `bubble`, `schedules`, `in_flight` (from `bubble_findings`): the pipeline runs, each sentence
  labelled with the stage work it was measured on (the SLEEP stand-in or the real compute);
* `real_compute(rows)`: the real-compute run: its bubbles, whether micro-batches shrank them
  (and, where undecided, why, from its numbers), how much the stages overlapped and idled, and
  the two schedules' bubbles and step times, paired;
* `findings(tp_rows, bubble_rows, real_rows)`: the short summary printed before the key takeaways.
"""
from __future__ import annotations

import math
import statistics

from scipy.stats import binomtest

from dltutor.core.findings import INCONCLUSIVE, differs, fmt
from dltutor.core.spread import mean_and_ci
from dltutor.model_parallel.bubble_findings import (BUBBLE_FLOOR, FORMULA, _groups, bubble, ends,  # noqa: F401
                                                    in_flight, schedules)

TOLERANCE = 1e-5      # a CHOSEN fp32 threshold, RELATIVE to the reference's largest value
SLEEP, REAL = "SLEEP stand-in", "real compute"


def tp(rows: list[dict], tolerance: float = TOLERANCE, hardware: str = "") -> list[str]:
    """Sentences on the TP table (`runs.tp_rows`)."""
    keys = ("out err", "dx err", "grad err", "DTensor err", "ours vs DTensor")
    worst = max(rows, key=lambda r: max(r.get(k, 0.0) for k in keys))
    err = max(worst.get(k, 0.0) for k in keys)
    out = [f"Largest difference of any split block from the whole one (output, input gradient, parameter "
           f"gradients, ours and torch's DTensor), relative to the whole block's largest value: {err:.1e} "
           f"({worst['block']}, {worst['ranks']} ranks) -- " + (
               f"below the fp32 tolerance {tolerance:g} (a chosen threshold): the split computes the same outputs and "
               "gradients up to fp32 rounding." if err < tolerance else
               f"ABOVE the fp32 tolerance {tolerance:g} (a chosen threshold): the split does not match the whole block here.")]
    for r in rows:
        ours, torch_ = r["all-reduces fwd/bwd"], r["DTensor fwd/bwd"]
        one = "one per direction, as f and g predict" if ours == "1/1" else "NOT one per direction"
        same = "the same" if ours == torch_ else "a different count"
        size = ("equal to" if r["bytes each"] == r["formula bytes"] else "NOT equal to")
        t = r["ranks"]
        out.append(f"{r['block']}, {t} ranks: our layers made {ours} all-reduces (fwd/bwd), "
                   f"{one}; torch's DTensor plan made {torch_}, {same}. Each reduced a tensor of "
                   f"{r['bytes each']:,} B, {size} tokens x d_model x 4 B ({r['formula bytes']:,} B); a ring "
                   f"all-reduce sends 2(t-1)/t of it per rank, {2 * (t - 1) / t * r['bytes each']:,.0f} B; "
                   f"{r['params/rank']:,} of {r['params whole']:,} parameters per rank.")
    return out + timings(rows, hardware)


def _pairs_text(r: dict) -> str:
    """Beside the t-interval: the median pair, how many pairs the split won, a two-sided sign test,
    and the pair furthest from the median (one such pair can make the interval by itself)."""
    pairs = r.get("pairs") or []
    if len(pairs) < 2:
        return ""
    diffs = [s - w for w, s in pairs]
    won = sum(d < 0 for d in diffs)
    p = binomtest(won, len(diffs), 0.5).pvalue
    mid = statistics.median(diffs)
    i = max(range(len(diffs)), key=lambda k: abs(diffs[k] - mid))
    w, s = pairs[i]
    return (f"; median pair {fmt(mid, 'ms')}, the split faster in {won} of {len(diffs)} pairs (sign test "
            f"p = {p:.2g}); furthest from the median: pair {i + 1}, split {fmt(s, 'ms')} vs whole "
            f"{fmt(w, 'ms')}")


def _speed(r: dict, hardware: str = "") -> tuple[str, int]:
    """One row's split-vs-whole sentence and its verdict: -1 split faster, 1 slower, 0 undecided.
    Whole = one process alone on the cores the ranks share; the runs alternate, run i of each a
    pair, so the verdict is the paired one: the mean of the differences against ITS 95 % CI."""
    a, b = r["ms split"], r["ms whole"]
    d, c = r.get("split - whole", a - b), r.get("± paired", float("nan"))
    threads, cores, t = r.get("whole threads", 1), r.get("cores"), r["ranks"]
    on = f" on {hardware}" if hardware else ""
    head = (f"{r['block']}{on}: {t} ranks (split) {fmt(a, 'ms')} vs one process alone with {threads} "
            f"thread(s) (whole) {fmt(b, 'ms')}, means of {r['runs']} alternated pairs; split - whole "
            f"per pair {fmt(d, 'ms')} ± {fmt(c)} (paired 95 % CI){_pairs_text(r)}")
    if cores and t > cores:
        head += f"; the {t} ranks shared {cores} cores, taking turns"
    if math.isnan(c) or abs(d) <= c:
        why = "one pair gives no interval" if math.isnan(c) else "the paired interval covers zero"
        return f"{head}: {INCONCLUSIVE}, {why}.", 0
    said = f"{head}: the split took {a / b:.2f}x the time of one process, beyond the paired interval."
    if _beyond_cores(r):
        said += (f" A speed-up above the {min(t, cores)} core(s) the ranks had is more than parallel "
                 "compute explains: smaller matrices per rank, or a slower one-process baseline (its "
                 "threads waiting for each other on busy cores).")
    return said, (-1 if a < b else 1)


def _beyond_cores(r: dict) -> bool:
    """A split faster than one process by more than the cores the ranks had can give."""
    cores = r.get("cores")
    return bool(cores) and r["ms split"] < r["ms whole"] and r["ms whole"] / r["ms split"] > min(r["ranks"], cores)


def timings(rows: list[dict], hardware: str = "") -> list[str]:
    """Split vs whole per block, then a count of the verdicts. Totals only: the all-reduces were
    not timed on their own, and where a speed-up exceeds the cores the ranks had, the comparison
    is confounded (t single-thread ranks get a larger share of busy cores than one process does)."""
    said = [_speed(r, hardware) for r in rows]
    out = [s for s, _ in said]
    n, faster, slower = len(said), sum(v == -1 for _, v in said), sum(v == 1 for _, v in said)
    if not faster + slower:
        return out
    line = (f"Split vs one process on the same cores, {n} block x rank-count case(s): the split faster in "
            f"{faster}, slower in {slower}, undecided in {n - faster - slower} (totals only: the "
            "all-reduces were not timed on their own).")
    over = [r for r, (_, v) in zip(rows, said) if v == -1 and _beyond_cores(r)]
    if over:
        line += (f" {len(over)} of the faster case(s) beat the one process by more than the cores the ranks "
                 "had can explain: t single-thread ranks are t runnable threads against the one "
                 "process's few, and on cores shared with other work the scheduler shares the CPU per "
                 "thread, so on this machine these times do not isolate tensor parallelism's cost.")
    return out + [line]


def _per_mb(r: dict) -> tuple[list, list]:
    """Per step of a row: a stage's busy ms per micro-batch, step*(1 - bubble)/m, and the step's
    ms per micro-batch, step/m (the micro-batch size is fixed, so these should not grow with m)."""
    steps, bub = r.get("steps ms") or [], r.get("bubbles") or []
    return [s * (1 - b) / r["m"] for s, b in zip(steps, bub)], [s / r["m"] for s in steps]


def _in_rounds(first: dict, last: dict) -> int:
    """How many rounds pair the two rows' steps (both m's ran in the same rounds); 0 when they
    did not (then each m is its own sample and the intervals are combined unpaired)."""
    n = len(first.get("steps ms") or [])
    both = first.get("m in rounds") and last.get("m in rounds")
    return n if both and n == len(last.get("steps ms") or []) and n > 1 else 0


def _work_per_mb(first: dict, last: dict) -> tuple[str, bool, bool]:
    """(sentence, grew, fell): busy and step time per micro-batch at the first and last m; the
    step's change decided per round (the ratio last/first within each round, its 95 % CI over the
    rounds) where the m's ran in the same rounds, else against the two means' intervals combined."""
    (b0, s0), (b1, s1) = _per_mb(first), _per_mb(last)
    if len(s0) < 2 or len(s1) < 2:
        return "the step time per micro-batch has no interval here (fewer than two steps)", False, False
    (mb0, _), (mb1, _) = mean_and_ci(b0), mean_and_ci(b1)
    (ms0, c0), (ms1, c1) = mean_and_ci(s0), mean_and_ci(s1)
    busy = (f"a stage was busy {fmt(mb0, 'ms')} per micro-batch at m={first['m']} and {fmt(mb1, 'ms')} at "
            f"m={last['m']} (step x (1 - bubble) / m)")
    n = _in_rounds(first, last)
    if n:
        ratio, ci = mean_and_ci([y / x for x, y in zip(s0, s1)])
        return (f"{busy}, and the step per micro-batch at m={last['m']} was {fmt(ratio)}x ± {fmt(ci)} that "
                f"at m={first['m']} ({fmt(ms1, 'ms')} vs {fmt(ms0, 'ms')}; ratio within each round, 95 % CI "
                f"over the {n} rounds)", ratio - ci > 1, ratio + ci < 1)
    grew, fell = (differs(ms0, ms1, c0, c1) and ms1 > ms0), (differs(ms0, ms1, c0, c1) and ms1 < ms0)
    return (f"{busy}, and the step took {fmt(ms0, 'ms')} ± {fmt(c0)} per micro-batch at m={first['m']} vs "
            f"{fmt(ms1, 'ms')} ± {fmt(c1)} at m={last['m']}", grew, fell)


def _m_effect(pts: list[dict], tag: str) -> str:
    """Did micro-batches shrink the real-compute bubble, AND help? Decided from the first and last
    m: a bubble fall counts as micro-batching helping only when the step time per micro-batch did
    not grow beyond the intervals (a bubble also falls when busy time swells). Then why the bubble
    sits where it does, from the run's numbers: overlap, idle, the formula's busy share."""
    first, last = pts[0], pts[-1]
    want = first["formula"] - last["formula"]
    got, ci = first["measured"] - last["measured"], math.hypot(first["spread"], last["spread"])
    how = ""
    if _in_rounds(first, last):
        got, ci = mean_and_ci([a - b for a, b in zip(first["bubbles"], last["bubbles"])])
        how = f" (paired within each of the {_in_rounds(first, last)} rounds, 95 % CI over the rounds)"
    head = (f"{tag}{last['schedule']} (p={last['stages']}), m={first['m']} -> m={last['m']}: {FORMULA} "
            f"drops by {fmt(want)}, the measured bubble by {fmt(got)} ± {fmt(ci)}{how}")
    work, grew, fell = _work_per_mb(first, last)
    if not math.isnan(ci) and got > ci and grew:
        verdict = (f"{head}: the measured bubble fell beyond the intervals, but {work}: the step per "
                   "micro-batch GREW, so the bubble fell because busy time swelled (on shared cores the "
                   "stages slow each other); this run does not show micro-batching helping the real compute.")
    elif not math.isnan(ci) and got > ci:
        verdict = (f"{head}: micro-batches shrank the bubble in this run, beyond the intervals, and the "
                   f"step per micro-batch did not grow beyond them ({work}); " + (
                       "it fell beyond them: micro-batching helped here." if fell else
                       "nor did it fall beyond them: the step per micro-batch got no faster that this run can show."))
    elif not math.isnan(ci) and -got > ci:
        verdict = f"{head}: the bubble GREW with m in this run, beyond the intervals ({work})."
    else:
        verdict = f"{head}: {INCONCLUSIVE} whether micro-batches shrank it ({work})."
    busy, alone = 1 - last["measured"], 1 - last["overlap"] - last["idle"]
    turns = (f"Some stage computed without the others for {fmt(100 * alone)} % of the step, more than "
             "they computed together: they mostly took turns, and that, not the fill and drain, set "
             "this bubble." if alone > last["overlap"] else
             f"Some stage computed without the others for {fmt(100 * alone)} % of the step, no more than "
             "they computed together: this run does not show what set the bubble.")
    return (f"{verdict} Why the bubble sits {fmt(last['measured'] - last['formula'])} above the formula at "
            f"m={last['m']}: the formula, which counts only the fill and drain, expects each stage to "
            f"compute {fmt(100 * (1 - last['formula']))} % of the step; here a stage computed "
            f"{fmt(100 * busy)} % (1 - bubble): the stages computed at the same time for only "
            f"{fmt(100 * last['overlap'])} % of the step and for {fmt(100 * last['idle'])} % none did "
            f"({fmt(100 * first['idle'])} % at m={first['m']}: sends, the schedule's own work, waiting for "
            f"a core). {turns}")


def _overlap(pts: list[dict], tag: str) -> str:
    r = pts[-1]
    return (f"{tag}{r['schedule']} at m={r['m']} (p={r['stages']}), means of the steps: two stages "
            f"computed at the same time for {fmt(100 * r['overlap'])} % of the step and none for "
            f"{fmt(100 * r['idle'])} %; per micro-batch a forward took {fmt(r['F ms'], 'ms')} and a "
            f"backward {fmt(r['B ms'], 'ms')} on a stage.")


def real_compute(rows: list[dict], floor: float = BUBBLE_FLOOR, hardware: str = "") -> list[str]:
    """The real-compute table: its bubbles (as `bubble`), whether m shrank them and helped (or
    why this run cannot tell), overlap and idle, and GPipe vs 1F1B paired (bubble and step time).
    Every sentence is labelled with the work and, when given, the hardware (e.g. CPU/gloo)."""
    work = f"{REAL}, {hardware}" if hardware else REAL
    tag = f"[{work}] "
    out = bubble(rows, floor, work=work)
    for _, _, pts in _groups(rows):
        if len(pts) > 1:
            out.append(_m_effect(pts, tag))
        out.append(_overlap(pts, tag))
    out += schedules(rows, work=work) + schedules(rows, work=work, key="steps ms", what="step time",
                                                  unit="ms")
    fb = {sched: pts[-1] for _, sched, pts in _groups(rows)}
    if len(fb) == 2:
        g, f = fb["gpipe"], fb["1f1b"]
        out.append(f"{tag}Per micro-batch at m={g['m']}, a forward/backward took {fmt(g['F ms'])}/"
                   f"{fmt(g['B ms'])} ms under GPipe and {fmt(f['F ms'])}/{fmt(f['B ms'])} ms under 1F1B "
                   "(means of the steps, not compared with an interval): no verdict on a difference; "
                   f"the stages overlapped {fmt(100 * g['overlap'])} % of the step under GPipe and "
                   f"{fmt(100 * f['overlap'])} % under 1F1B.")
    return out


def findings(tp_rows: list[dict], bubble_rows: list[dict], real_rows: list[dict] | None = None,
             work: str = SLEEP, hardware: str = "") -> list[str]:
    """The summary before the key takeaways: TP exactness, the bubble's change with m (stand-in,
    and the real-compute run's verdict when it ran), 1F1B beside GPipe, what a stage held."""
    gpipe = [r for r in bubble_rows if r["schedule"] == "gpipe"] or bubble_rows
    out = [tp(tp_rows)[0], *(s for s in bubble(gpipe, work=work) if "measured bubble" in s),
           *schedules(bubble_rows, work=work), *in_flight(bubble_rows, work=work)]
    if real_rows:
        out += [s for s in real_compute(real_rows, hardware=hardware) if "drops by" in s or "1F1B vs GPipe" in s]
    else:
        out.append(f"No real-compute run here (REAL_COMPUTE_RUN off): every bubble above is the {work}'s.")
    return out
