"""What lab 09's MoE runs showed, as sentences built from their rows (dltutor.experts.runs).

    aux_findings(load_rows(study))          did the auxiliary loss even the load?
    drop_findings(drop_rows(study))         dropped fraction against capacity factor, per skew
    straggler_findings(straggler_rows(study))  rows per rank and the slowest rank's expert time
    alltoall_findings(fit_alltoall(points)) all-to-all time against the fitted alpha-beta model
    deepspeed_findings(side_by_side(study), study)  the course's layer beside DeepSpeed's
    check_findings(check_rows(exact))       expert parallelism vs one process: exact or not

Every difference is decided with the 95 % intervals (dltutor.core.spread): "inconclusive here"
when they cover the gap.
"""
from __future__ import annotations

from collections import defaultdict
from statistics import median, quantiles

from dltutor.core.findings import INCONCLUSIVE, accuracy_halfwidth, compare, differs, fmt, trend
from dltutor.core.spread import mean_and_ci


def aux_findings(rows: list[dict]) -> list[str]:
    """rows: load_rows' two rows (with, without the aux loss)."""
    on = next(r for r in rows if r["aux weight"] > 0)
    off = next(r for r in rows if r["aux weight"] == 0)
    key, ci = "max/mean load, last steps", "± last"
    out = [f"Busiest expert's load / the mean, over the last {on['steps averaged']} steps (one seed "
           "each; the ± are over the steps of one run, and neighbouring steps are not independent): "
           + compare(f"with the aux loss (weight {on['aux weight']:g})", on[key], "without it", off[key],
                     spread_a=on[ci], spread_b=off[ci])]
    first = "max/mean load, first steps"
    if differs(on[key], off[key], on[ci], off[ci]):
        verdict = ("the aux loss evened the load" if on[key] < off[key] else
                   "the aux loss did NOT even the load") + (
            f": {fmt(on[first])} vs {fmt(off[first])} over the first {on['steps averaged']} steps, "
            f"{fmt(on[key])} vs {fmt(off[key])} over the last")
    else:
        verdict = f"what the aux loss did is {INCONCLUSIVE}"
    out.append(f"Both runs change as they train ({fmt(on[first])} -> {fmt(on[key])} with the aux loss, "
               f"{fmt(off[first])} -> {fmt(off[key])} without; 1 = every expert the same load), so the "
               f"aux loss's part is the gap between the two runs at the same steps: {verdict}.")
    out.append(compare("test accuracy with the aux loss", on["test accuracy"], "without",
                       off["test accuracy"], spread_a=_acc_ci(on), spread_b=_acc_ci(off)))
    return out


def _acc_ci(row: dict) -> float:
    return accuracy_halfwidth(row["test accuracy"], row["test images"])


def drop_findings(rows: list[dict]) -> list[str]:
    """rows: drop_rows (skew, capacity factor, dropped fraction); counts, exact, no spread."""
    by_skew = defaultdict(list)
    for r in rows:
        if r["capacity factor"] != "none":
            by_skew[r["skew"]].append(r)
    out = []
    for skew, pts in sorted(by_skew.items()):
        pts.sort(key=lambda r: r["capacity factor"])
        out.append(trend(f"dropped fraction at skew {skew:g}", [r["capacity factor"] for r in pts],
                         [r["dropped fraction"] for r in pts], x_name="capacity factor"))
    lowest = min(r["capacity factor"] for pts in by_skew.values() for r in pts)
    at = sorted(((s, next(r for r in pts if r["capacity factor"] == lowest)) for s, pts in by_skew.items()))
    out.append(trend(f"dropped fraction at capacity factor {lowest:g}", [s for s, _ in at],
                     [r["dropped fraction"] for _, r in at], x_name="skew"))
    free = [(s, min((r for r in pts if r["dropped fraction"] == 0), key=lambda r: r["capacity factor"],
                    default=None)) for s, pts in sorted(by_skew.items())]
    out.append("Smallest capacity factor that dropped nothing: " + ", ".join(
        f"skew {s:g}: {fmt(r['capacity factor']) if r else 'none of those tried'}" for s, r in free) + ".")
    return out


def straggler_findings(rows: list[dict]) -> list[str]:
    """rows: straggler_rows (one per skew, no capacity limit)."""
    out = [trend("max/mean rows per rank (no capacity limit)", [r["skew"] for r in rows],
                 [r["max/mean rows"] for r in rows], x_name="skew")]
    base = next((r for r in rows if r["skew"] == 0), None)
    if base and len(base["rows per rank"]) == 2 and min(base["expert ms per rank"]) > 0:
        (r0, r1), (t0, t1) = base["rows per rank"], base["expert ms per rank"]
        skewed = [r for r in rows if r["skew"] > 0]
        zero_busiest = bool(skewed) and all(r["busiest rank"] == 0 for r in skewed)
        out.append(f"Expert 0, the one the skew favours, lives on rank 0"
                   + (", and rank 0 was the busier rank at every skew above 0" if zero_busiest else "")
                   + f". At skew 0 rank 0 had {r0 / r1:.2f}x rank 1's rows and took "
                   f"{t0 / t1:.2f}x its expert time (means over the repeats): a rank's own speed "
                   "differs too, so read the ratios below against that.")
    for r in rows:
        head = (f"skew {r['skew']:g}: rank {r['busiest rank']}'s experts got {r['rows ratio']:.2f}x the "
                f"rows of rank {r['least busy rank']}'s and took {fmt(r['time ratio'])}x their time "
                f"(±{fmt(r['± time ratio'])}, paired over {r['repeats']} repeats)")
        if not differs(r["time ratio"], 1.0, r["± time ratio"]):
            out.append(head + f": {INCONCLUSIVE}, the interval covers 1 (equal times).")
            continue
        if r["time ratio"] < 1:
            out.append(head + ": the busier rank was the FASTER one here, so the rows do not set "
                              "the pace on this machine.")
            continue
        waited = differs(r["wait ms"], 0.0, r["± wait"]) and r["wait ms"] > 0
        out.append(head + f": the busier rank is the slower one. Rank {r['least busy rank']} spent "
                   f"{fmt(r['wait ms'])} ms (±{fmt(r['± wait'])}) longer in the all-to-alls than rank "
                   f"{r['busiest rank']}, whose experts ran {fmt(r['extra expert ms'])} ms "
                   f"(±{fmt(r['± extra'])}) longer: "
                   + ("it waited for the busier rank at the combine." if waited else
                      f"its wait is {INCONCLUSIVE}."))
    return out


def alltoall_findings(fit: dict) -> list[str]:
    """fit: runs.fit_alltoall. Per token count: the measured mean (± 95 % CI over its repeats)
    beside the model; agreement when the model is inside the interval."""
    groups = defaultdict(list)
    for p, m in zip(fit["points"], fit["model"]):
        groups[p["bytes"]].append((p["seconds"], m))
    out = [f"Fitted on {fit.get('hardware', 'this machine')} (relative least squares on every "
           f"sample, notebook 05's fit_alpha_beta): alpha = "
           f"{fit['alpha'] * 1e6:.1f} us, beta = {fit['beta'] * 1e9:.3g} ns/byte "
           f"({1 / fit['beta'] / 1e9:.3g} GB/s)" if fit["beta"] else
           f"Fitted: alpha = {fit['alpha'] * 1e6:.1f} us, beta not resolvable (0)."]
    typical = []
    for nbytes, pts in sorted(groups.items()):
        mean, ci = mean_and_ci([s for s, _ in pts])
        model = pts[0][1]
        if ci != ci:
            verdict = f"{INCONCLUSIVE}, one repeat gives no interval"
        elif abs(mean - model) <= ci:
            verdict = "the model is inside the interval"
        else:
            verdict = f"the model is {'below' if model < mean else 'above'} it by {fmt(abs(mean - model) * 1e6)} us"
        samples = sorted(s for s, _ in pts)
        q1, q3 = quantiles(samples, n=4)[0::2] if len(samples) > 1 else (samples[0], samples[0])
        typical.append((q1 <= model <= q3, model < median(samples)))
        out.append(f"{fmt(nbytes)} B: measured {fmt(mean * 1e6)} ± {fmt(ci * 1e6)} us (median "
                   f"{fmt(median(samples) * 1e6)} us, middle half {fmt(q1 * 1e6)}-{fmt(q3 * 1e6)} us, "
                   f"slowest {fmt(samples[-1] * 1e6)} us) vs model {fmt(model * 1e6)} us: {verdict}.")
    out.append(_fit_verdict(out[1:], typical, fit.get("hardware", "this machine")))
    return out


def _fit_verdict(lines: list[str], typical: list[bool], hw: str) -> str:
    """Whether the α-β line describes the means; if not, whether it at least falls in the middle
    half of the samples (the typical all-to-all) or describes neither."""
    inside = sum("inside the interval" in line for line in lines)
    n, half = len(lines), (len(lines) + 1) // 2
    if inside >= half:
        return f"The α-β line is inside {inside} of {n} intervals: it describes these all-to-alls on {hw}."
    head = f"The α-β line misses the mean at {n - inside} of {n} sizes"
    middle, under = sum(t for t, _ in typical), sum(u for _, u in typical)
    if middle >= half and under >= half:
        return (f"{head}, falls in the middle half of the samples at {middle} but under the median at "
                f"{under}: one α and one β underestimate most of these all-to-alls on {hw}; read the "
                "line as a lower bound.")
    if middle >= half:
        return (f"{head}, but falls in the middle half of the samples at {middle}: it describes the "
                f"typical all-to-all, and a few slow samples (stalls of a shared machine, {hw}) raise "
                "the means. Use it for the typical cost, not the mean.")
    return (f"{head} and falls in the middle half of the samples at only {middle}: one α and one β "
            f"do not describe these all-to-alls on {hw}; do not use the line to predict them.")


def deepspeed_findings(rows: list[dict], study: dict) -> list[str]:
    """rows: side_by_side; study: run_study's reports (their describe() fields)."""
    c, d = study["course"][0], study["deepspeed"][0]
    first, last = rows[0], rows[-1]
    n = len(rows)
    tail = rows[-max(n // 3, 2):]
    cl, cl_ci = mean_and_ci([r["course loss"] for r in tail])
    dl, dl_ci = mean_and_ci([r["DeepSpeed loss"] for r in tail])
    return [
        f"Step 0, same weights and images: loss {fmt(first['course loss'])} (course) vs "
        f"{fmt(first['DeepSpeed loss'])} (DeepSpeed); load {first['course load']} vs "
        f"{first['DeepSpeed exp_counts']}: they route differently from the first step.",
        compare(f"loss over the last {len(tail)} steps, course", cl, "DeepSpeed", dl,
                spread_a=cl_ci, spread_b=dl_ci),
        f"Capacity on {c['tokens_per_rank']} tokens per rank: {first['course capacity']} slots per "
        f"expert (course: {c['capacity_formula']}) vs {first['DeepSpeed capacity']} (DeepSpeed: "
        f"{d['capacity_formula']}, min_capacity={d['min_capacity']}).",
        f"Dropped fraction, mean over {n} steps: {fmt(_mean(rows, 'course dropped'))} (course, "
        f"{c['drop_order']}) vs {fmt(_mean(rows, 'DeepSpeed dropped'))} (DeepSpeed, {d['drop_order']}); "
        f"second expert: {c['second_expert']} vs {d['second_expert']}.",
        f"aux loss at the last step: {fmt(last['course aux'])} (course, every slot counted) vs "
        f"{fmt(last['DeepSpeed l_aux'])} (DeepSpeed's l_aux, first choices counted).",
        compare(f"final test accuracy on {c['test_images']} images, course (the run without skew, aux "
                f"weight {c['aux_weight']:g}, the one the sweeps use)", c["test_accuracy"],
                "DeepSpeed", d["test_accuracy"],
                spread_a=accuracy_halfwidth(c["test_accuracy"], c["test_images"]),
                spread_b=accuracy_halfwidth(d["test_accuracy"], d["test_images"])),
    ]


def _mean(rows, key) -> float:
    return sum(r[key] for r in rows) / len(rows)


def check_findings(rows: list[dict], tolerance: float = 1e-12) -> list[str]:
    """Expert parallelism vs one process (runs.check_rows): exact or not, per number of ranks."""
    out = []
    for n in sorted({r["ranks"] for r in rows}):
        mine = [r for r in rows if r["ranks"] == n]
        worst = max(max(r[k] for k in ERRS) for r in mine)
        dropped = sum(r["dropped"] > 0 for r in mine)
        verdict = "the same layer, split" if worst <= tolerance else "NOT the same layer"
        out.append(f"{n} ranks, {len(mine)} cases ({dropped} of them dropping tokens): largest "
                   f"difference from one process {worst:.1e} in float64 (output, input gradient, "
                   f"gate and expert gradients; tolerance {tolerance:.0e}): {verdict}.")
    return out


ERRS = ("out_err", "dx_err", "gate_err", "expert_err")
