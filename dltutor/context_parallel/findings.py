"""What notebook 09's long-sequence runs showed, in sentences built from their numbers.

* `exactness(check_rows)`: the worst error per dtype against the issue's tolerance;
* `blocks(block_rows)`: causal work per rank, contiguous vs zigzag, as the ranks grow, beside
  `ring.blocks_formula`;
* `bytes_sent(bytes_rows)`: bytes per rank, ring vs Ulysses, counted beside the formulas, which
  sends less and the head-count limit that decides whether Ulysses can run at all;
* `memory(memory_rows)`: peak bytes per rank against the formula, how it grows with the sequence
  and how much the split saves;
* `speed(time_rows)`: each split version against one process (mean ± 95 % CI), and what that
  says on this hardware;
* `findings(...)`: the short summary.
"""
from __future__ import annotations

from dltutor.core.findings import INCONCLUSIVE, compare, differs, fmt, trend


def exactness(rows: list[dict]) -> list[str]:
    out = []
    for dtype in sorted({r["dtype"] for r in rows}, reverse=True):
        mine = [r for r in rows if r["dtype"] == dtype]
        worst = max(mine, key=lambda r: max(r["out err"], r["grad err"]))
        err, tol = max(worst["out err"], worst["grad err"]), worst["tolerance"]
        ok = all(max(r["out err"], r["grad err"]) <= r["tolerance"] for r in mine)
        out.append(f"{dtype}: the largest difference from one process over {len(mine)} checks "
                   f"(outputs and dq, dk, dv) is {err:.1e} ({worst['impl']}, {worst['ranks']} ranks, "
                   f"mask {worst['mask']}, {worst['layout']}) -- "
                   + (f"every check within {tol:g}: the split computes the same attention."
                      if ok else f"ABOVE the tolerance {tol:g} in at least one check: not exact here."))
    return out


def _imbalance(rows, n, layout):
    pts = [r for r in rows if r["ranks"] == n and r["layout"] == layout]
    if not pts:
        return None
    blocks = [r["blocks"] for r in pts]
    return max(blocks) / (sum(blocks) / len(blocks)), pts


def blocks(rows: list[dict]) -> list[str]:
    """Causal work per rank: the slowest rank's share against the mean (1.0 = balanced)."""
    out = []
    ranks = sorted({r["ranks"] for r in rows})
    for layout in ("contiguous", "zigzag"):
        got = [(n, _imbalance(rows, n, layout)) for n in ranks]
        got = [(n, g) for n, g in got if g]
        if not got:
            continue
        same = all(abs(r["blocks"] - r["formula"]) < 1e-9 for _, (_, pts) in got for r in pts)
        per = "; ".join(f"{n} ranks: " + ", ".join(f"{r['blocks']:.3g}" for r in
                                                    sorted(pts, key=lambda r: r["rank"]))
                        for n, (_, pts) in got)
        out.append(f"Causal, {layout}: blocks of work per rank (rank 0 first) {per} -- "
                   + ("equal to ring.blocks_formula on every rank." if same
                      else "NOT equal to ring.blocks_formula on every rank."))
        ratios = ", ".join(f"{g[0]:.2f}x the mean at {n} ranks" for n, g in got)
        way = ("grows with the ranks" if len(got) > 1 and got[-1][1][0] > got[0][1][0] + 1e-9 else
               "stays at 1.00: balanced" if all(abs(g[0] - 1) < 0.05 for _, g in got) else
               "does not grow with the ranks")
        out.append(f"{layout}: the busiest rank's causal work (counted, exact): {ratios} -- "
                   f"the imbalance {way}.")
    return out


def bytes_sent(rows: list[dict]) -> list[str]:
    """Ring vs Ulysses per rank count, counted; which sends less; the head limit."""
    out = []
    for n in sorted({r["ranks"] for r in rows}):
        by = {r["impl"]: r for r in rows if r["ranks"] == n}
        for r in by.values():
            ok = r["forward"] == r["formula forward"] and r["backward"] == r["formula backward"]
            out.append(f"{r['impl']}, {n} ranks: each rank sent {r['forward']:,} B forward and "
                       f"{r['backward']:,} B backward per layer, "
                       + ("equal to its formula." if ok else
                          f"NOT its formula ({r['formula forward']:,} / {r['formula backward']:,} B)."))
        if {"ring", "ulysses"} <= set(by):
            ring, uly = by["ring"], by["ulysses"]
            a, b = ring["forward"] + ring["backward"], uly["forward"] + uly["backward"]
            fwd = ("forward equal, the gap is the ring's backward" if ring["forward"] == uly["forward"]
                   else f"forward {ring['forward'] / uly['forward']:.2g}x, backward "
                        f"{ring['backward'] / uly['backward']:.2g}x")
            out.append(f"{n} ranks, forward+backward: the ring sent {a / b:.2g}x what Ulysses sent "
                       f"({a:,} vs {b:,} B; {fwd}) -- " + ("Ulysses sends less here." if a > b else
                                                           "the ring sends no more here."))
    heads = {r["heads"] for r in rows}
    if heads:
        h = min(heads)
        out.append(f"Ulysses gives each rank whole heads: with {h} heads it runs on at most {h} "
                   f"ranks (and only on counts that divide {h}); the ring has no such limit (and its K/V "
                   "messages can overlap the block computations: not measured here). This run "
                   f"measured {' and '.join(str(n) for n in sorted({r['ranks'] for r in rows}))} "
                   "ranks; by the two formulas a ring rank's bytes level off as ranks are added "
                   "while a Ulysses rank's fall as 1/P, and past the head count only the ring runs.")
    return out


def memory(rows: list[dict]) -> list[str]:
    out = [f"What is measured: {rows[0]['how']}."] if rows and rows[0].get("how") else []
    for n in sorted({r["ranks"] for r in rows}):
        pts = sorted((r for r in rows if r["ranks"] == n), key=lambda r: r["seq"])
        impl = pts[0]["impl"]
        ratios = [r["ratio"] for r in pts]
        out.append(trend(f"{impl}, {n} rank(s): peak bytes per rank", [r["seq"] for r in pts],
                         [r["peak_bytes"] for r in pts], x_name="seq", unit="B")
                   + f" Measured / formula: {min(ratios):.2f} to {max(ratios):.2f}"
                   + (f" (the formula misses {100 * (min(ratios) - 1):.0f}-{100 * (max(ratios) - 1):.0f} % "
                      "of the peak: buffers it does not count)" if min(ratios) > 1.05 else "")
                   + f"; at seq={pts[-1]['seq']} the {pts[-1]['dominant']} term dominates.")
        if len(pts) > 1:
            grow = pts[-1]["peak_bytes"] / pts[-2]["peak_bytes"]
            want = pts[-1]["formula_bytes"] / pts[-2]["formula_bytes"]
            out.append(f"{impl}, {n} rank(s): from seq={pts[-2]['seq']} to {pts[-1]['seq']} the "
                       f"measured peak grew {grow:.2f}x, the formula {want:.2f}x.")
    one = {r["seq"]: r for r in rows if r["ranks"] == 1}
    for n in sorted({r["ranks"] for r in rows} - {1}):
        common = sorted(set(one) & {r["seq"] for r in rows if r["ranks"] == n})
        if common:
            s = common[-1]
            split = next(r for r in rows if r["ranks"] == n and r["seq"] == s)
            out.append(f"seq={s}: one process peaked at {fmt(one[s]['peak_bytes'])} B, each of {n} "
                       f"ring ranks at {fmt(split['peak_bytes'])} B: "
                       f"{one[s]['peak_bytes'] / split['peak_bytes']:.2f}x less per rank "
                       f"(formula {one[s]['formula_bytes'] / split['formula_bytes']:.2f}x; one score "
                       f"block {one[s]['score_bytes'] / max(split['score_bytes'], 1):.0f}x smaller).")
    if one and len(rows) > len(one):
        s = max(one)
        ring_rows = [r for r in rows if r["ranks"] > 1 and r["seq"] == s]
        if ring_rows:
            r = max(ring_rows, key=lambda r: r["ranks"])
            out.append(f"Some of that is recomputation rather than the split: at seq={s} the "
                       f"one-process attention (written out) keeps {fmt(one[s]['saved_bytes'])} B for "
                       f"backward, its s x s probabilities among them; a ring rank keeps "
                       f"{fmt(r['saved_bytes'])} B ({r['ranks']} ranks: q, k, v, out and the lse) and "
                       "recomputes each block's probabilities in backward, as FlashAttention does on one "
                       "device. This run does not separate the two (a fused kernel's memory on one "
                       "process, the fair baseline for that, is not measured here).")
    return out


def speed(rows: list[dict]) -> list[str]:
    """Each split implementation against each one-process form (rank 0 alone: the written-out
    attention, and torch's fused SDPA where the lab timed it), per rank count and mask; then one
    summary per baseline."""
    out, tally = [], {}
    for n in sorted({r["ranks"] for r in rows}):
        for mask in ("none", "causal"):
            pts = {r["impl"]: r for r in rows if r["ranks"] == n and r["mask"] == mask}
            for base_name, base in ((k, v) for k, v in pts.items() if k.startswith("one process")):
                for impl, r in pts.items():
                    if impl.startswith("one process"):
                        continue
                    out.append(f"{n} ranks, mask {mask}, {r['hardware']}: " + compare(
                        impl, r["ms"], base_name, base["ms"], unit="ms", spread_a=r["±"],
                        spread_b=base["±"]))
                    verdict = ("undecided" if not differs(r["ms"], base["ms"], r["±"], base["±"])
                               else "slower" if r["ms"] > base["ms"] else "faster")
                    tally.setdefault(base_name, {"faster": 0, "slower": 0, "undecided": 0})[verdict] += 1
    out.append(speed_summary(rows, tally))
    return out


def speed_summary(rows, tally: dict) -> str:
    """How many decided comparisons were faster / slower per baseline, and what a faster split on
    this machine can and cannot mean."""
    if not tally:
        return "No split implementation was timed."
    hw = rows[0]["hardware"]
    what = {"one process": "the written-out one-process attention",
            "one process (fused SDPA)": "torch's fused SDPA on one process"}
    parts = [f"against {what.get(b, b)}: faster in {t['faster']}, slower in {t['slower']}, "
             f"{INCONCLUSIVE} in {t['undecided']}" for b, t in tally.items()]
    if not any(t["faster"] + t["slower"] for t in tally.values()):
        return f"No comparison decided beyond the spreads ({INCONCLUSIVE}): " + "; ".join(parts) + "."
    shape = rows[0].get("shape", "")
    note = (f" On {hw} ({_cores_said(rows)}) one process runs on one rank's threads, so part of a "
            "faster split is plain parallelism, a causal split also skips the masked blocks, and a "
            "slower one pays for its messages; what the split buys for sure is memory per rank"
            if hw.startswith("CPU") else f" On {hw}")
    head = "; ".join(parts)
    return head[0].upper() + head[1:] + (f" ({shape})" if shape else "") + "." + note + "."


def _cores_said(rows) -> str:
    """How the ranks shared this machine's cores, per rank count (dltutor.core.env's rule)."""
    from dltutor.core.env import cpu_cores, threads_per_rank
    cores = cpu_cores()
    return "; ".join(f"{n} ranks: {min(n * threads_per_rank(n), cores)} of {cores} cores against the "
                     f"baseline's {threads_per_rank(n)}" + (", oversubscribed" if n > cores else "")
                     for n in sorted({r["ranks"] for r in rows}))


def findings(check_rows, block_rows, bytes_rows, memory_rows, time_rows) -> list[str]:
    """The summary: exactness, the causal balance, bytes, memory saved, and the speed verdict."""
    mem = [s for s in memory(memory_rows) if s.startswith("seq=")]
    bal = [s for s in blocks(block_rows) if "busiest" in s]
    return [*exactness(check_rows), *bal, *[s for s in bytes_sent(bytes_rows) if "x what" in s],
            *mem, speed(time_rows)[-1]]



def trap(t: dict) -> list[str]:
    """ring.lse_trap's errors as sentences: forward right both ways, gradients only one way."""
    tol = 1e-12 if t["dtype"] == "float64" else 1e-5
    ok = lambda e: e <= tol  # noqa: E731
    out = []
    for name, what in (("fused", "torch's fused CPU kernel (its logsumexp not differentiable: "
                        f"requires_grad={t['lse_differentiable_fused']})"),
                       ("course", "the course's written-out block (its logsumexp differentiable: "
                        f"requires_grad={t['lse_differentiable_course']})")):
        fwd, dq, dk = (t[f"{k}_error_{name}"] for k in ("forward", "dq", "dk"))
        out.append(f"{t['blocks']} key blocks merged through {what}: output {fwd:.1e}, dq {dq:.1e}, "
                   f"dk {dk:.1e} from attention on the whole sequence ({t['dtype']}, tolerance "
                   f"{tol:g}): forward {'right' if ok(fwd) else 'WRONG'}, gradients "
                   f"{'right' if ok(max(dq, dk)) else 'WRONG'}.")
    return out


def torch_cp(rows: list[dict]) -> list[str]:
    """What torch's context_parallel did in each run (torch_cp.describe), with the ranks."""
    from dltutor.context_parallel.torch_cp import describe
    return [f"{r['ranks']} ranks: {describe(r)}" for r in rows] or [
        "torch's context_parallel did not run in these launches."]
