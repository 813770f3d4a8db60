"""What notebook 06's runs showed, in sentences built from their numbers (dltutor.core.findings).

* `tp(rows)`: the TP checks (errors against the fp32 tolerance), all-reduces counted beside
  Megatron's one per block and direction, bytes beside the formula, and the timings (one mean each);
* `bubble(rows)`: per (p, schedule) how the measured bubble moves with m, how far it sits from
  (p-1)/(m+p-1) and whether that gap grows with m (spread: half the min-max range of the steps);
* `in_flight(rows)`: the most micro-batches a stage held, GPipe beside 1F1B (1F1B's point);
* `findings(tp_rows, bubble_rows)`: the short summary printed before the key takeaways.
"""
from __future__ import annotations

from dltutor.core.findings import against, trend

TOLERANCE = 1e-5      # fp32 rounding: the tolerance tests/test_model_parallel.py holds the checks to
BUBBLE_FLOOR = 0.02   # timer and scheduling jitter: a bubble within this of the formula "agrees"
FORMULA = "the formula (p-1)/(m+p-1)"


def tp(rows: list[dict], tolerance: float = TOLERANCE) -> list[str]:
    """Sentences on the TP table (`runs.tp_rows`)."""
    keys = ("out err", "grad err", "DTensor err", "ours vs DTensor")
    worst = max(rows, key=lambda r: max(r[k] for k in keys))
    err = max(worst[k] for k in keys)
    out = [f"Largest difference of any split block from the whole one: {err:.1e} ({worst['block']}, "
           f"{worst['ranks']} ranks) -- " + (f"below the fp32 tolerance {tolerance:g}: the split "
                                             "computes the same outputs and gradients."
                                             if err < tolerance else
                                             f"ABOVE the fp32 tolerance {tolerance:g}: the split "
                                             "does not match the whole block here.")]
    for r in rows:
        ours, torch_ = r["all-reduces fwd/bwd"], r["DTensor fwd/bwd"]
        one = "one per direction, as f and g predict" if ours == "1/1" else "NOT one per direction"
        same = "the same" if ours == torch_ else "a different count"
        size = ("equal to" if r["bytes each"] == r["formula bytes"] else "NOT equal to")
        out.append(f"{r['block']}, {r['ranks']} ranks: our layers made {ours} all-reduces (fwd/bwd), "
                   f"{one}; torch's DTensor plan made {torch_}, {same}. Each moved "
                   f"{r['bytes each']:,} B, {size} tokens x d_model x 4 B ({r['formula bytes']:,} B); "
                   f"{r['params/rank']:,} of {r['params whole']:,} parameters per rank.")
    out.append("Timings (" + "; ".join(f"{r['block']} on {r['ranks']} ranks {r['ms split']:.1f} ms "
                                       f"split vs {r['ms whole']:.1f} ms whole" for r in rows)
               + "): one mean each, no spread measured, so no verdict on speed from this run.")
    return out


def _spread(row: dict) -> float:
    return row.get("spread", 0.0)


def _groups(rows):
    for p in sorted({r["stages"] for r in rows}):
        for sched in ("gpipe", "1f1b"):
            pts = sorted((r for r in rows if r["stages"] == p and r["schedule"] == sched),
                         key=lambda r: r["m"])
            if pts:
                yield p, sched, pts


def bubble(rows: list[dict], floor: float = BUBBLE_FLOOR) -> list[str]:
    """Sentences on the bubble table (`runs.bubble_rows`, with its `spread` column)."""
    out = []
    for p, sched, pts in _groups(rows):
        ms, spreads = [r["m"] for r in pts], [_spread(r) for r in pts]
        out.append(trend(f"{sched} measured bubble (p={p})", ms, [r["measured"] for r in pts],
                         x_name="m", spreads=spreads))
        if len(pts) > 1:
            out.append(trend(f"{sched} gap to {FORMULA} (measured - formula, p={p})", ms,
                             [r["measured"] - r["formula"] for r in pts], x_name="m", spreads=spreads))
        last = pts[-1]
        out.append(against(f"{sched} bubble at m={last['m']} (p={p})", last["measured"], last["formula"],
                           tolerance=max(floor, _spread(last)), source=FORMULA))
    return out


PREDICTED = {"gpipe": ("m", lambda m, p: m), "1f1b": ("min(m, p)", lambda m, p: min(m, p))}


def in_flight(rows: list[dict]) -> list[str]:
    """1F1B's point, from the `max in flight` column: micro-batches a stage held at once."""
    out = []
    for p in sorted({r["stages"] for r in rows}):
        held = {sched: [(r["m"], r["max in flight"]) for r in pts]
                for q, sched, pts in _groups(rows) if q == p}
        text = []
        for sched, pairs in held.items():
            name, rule = PREDICTED[sched]
            kept = all(n == rule(m, p) for m, n in pairs)
            text.append(f"{sched} held " + ", ".join(f"{n} at m={m}" for m, n in pairs)
                        + (f" (= {name} in every run)" if kept else f" (not always {name})"))
        line = f"Most micro-batches a stage held at once, p={p}: " + "; ".join(text) + "."
        if len(held) == 2:
            m, g = held["gpipe"][-1]
            f = dict(held["1f1b"]).get(m)
            if f is not None:
                line += (f" At m={m}, 1F1B held {g / f:.2g}x fewer activations than GPipe." if f < g
                         else f" At m={m}, 1F1B held no fewer than GPipe ({f} vs {g}).")
        out.append(line)
    return out


def findings(tp_rows: list[dict], bubble_rows: list[dict]) -> list[str]:
    """The summary before the key takeaways: TP exactness, the GPipe bubble's trend, 1F1B's memory."""
    gpipe = [r for r in bubble_rows if r["schedule"] == "gpipe"] or bubble_rows
    return [tp(tp_rows)[0], *(s for s in bubble(gpipe) if "measured bubble" in s), *in_flight(bubble_rows)]
