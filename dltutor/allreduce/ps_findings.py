"""What section 8a's run shows (parameter server vs ring), from `param_server.rows` only.

Every pass of ps_bench times both forms at every W in one rotated sweep, so each comparison is
PAIRED over the passes (`dltutor.allreduce.paired`): a ratio per pass, its geometric mean and
95 % interval, decided when the interval excludes 1x.

- `findings(rows)`: per form, the growth from the smallest W to the largest; PS vs ring at both;
  the measured PS/ring ratio against the model's; whether the server's growth exceeds the ring's;
  and, when the launch held more processes than cores, that the run cannot test the model's growth.
- `alpha_line(summary, alpha_two_ranks, beta_two_ranks)`: this launch's ping-pong α and β beside
  section 3's 2-rank ones.
- `fit_lines(summary)`: the passes' disturbance, and whether the ping-pong fit describes its points.
"""
from __future__ import annotations

from dltutor.allreduce import paired
from dltutor.core.findings import INCONCLUSIVE

FORM_TEXT = {"ps": "parameter server", "ring": "ring all-reduce (dist.all_reduce)"}


def _times(rows, form, w) -> list[float]:
    return next(r["times_ms"] for r in rows if r["form"] == form and r["workers"] == w)


def _row(rows, form, w) -> dict:
    return next(r for r in rows if r["form"] == form and r["workers"] == w)


def findings(rows: list[dict]) -> list[str]:
    """Sentences from `param_server.rows(summary)`."""
    ws = sorted({r["workers"] for r in rows})
    lo, hi = ws[0], ws[-1]
    out = []
    for form in ("ps", "ring"):
        if hi > lo:
            r = paired.ratio(_times(rows, form, hi), _times(rows, form, lo))
            out.append(f"{FORM_TEXT[form]}, time per step from W={lo} to W={hi} (median "
                       f"{_row(rows, form, lo)['median_ms']:.3g} -> {_row(rows, form, hi)['median_ms']:.3g} ms): "
                       + _growth(r, _row(rows, form, hi)["model_ms"] / _row(rows, form, lo)["model_ms"]))
    for w in (lo, hi) if hi > lo else (lo,):
        r = paired.ratio(_times(rows, "ps", w), _times(rows, "ring", w))
        model = _row(rows, "ps", w)["model_ms"] / _row(rows, "ring", w)["model_ms"]
        out.append(f"At W={w}: " + paired.ratio_text("parameter server", "ring", r)
                   + f"; the α-β model (ping-pong fit) predicts {model:.2f}x" + _against(r, model) + ".")
    if hi > lo:
        out.append(_growth_gap(rows, lo, hi))
    return out + _shared_cores(rows)


def _growth(r: paired.Ratio, model: float) -> str:
    if r.n < 2:
        return f"x{r.geo:.2f} in the one pass: {INCONCLUSIVE}, one pass gives no interval (model: x{model:.2f})."
    body = f"x{r.geo:.2f} (95 % CI x{r.lo:.2f}-x{r.hi:.2f} over {r.n} paired passes; model: x{model:.2f})"
    if r.decided:
        return f"{'rose' if r.lo > 1 else 'fell'} {body}" + _against(r, model) + "."
    return f"{body}: {INCONCLUSIVE}, the interval includes x1{paired.why(r)}."


def _against(r: paired.Ratio, model: float) -> str:
    if not r.excludes(model):
        return "" if r.n < 2 else ", the model's value lies inside the measured interval"
    return f", the model's value lies {'above' if r.hi < model else 'below'} the measured interval"


def _growth_gap(rows, lo, hi) -> str:
    """Per pass: (ps(hi)/ps(lo)) / (ring(hi)/ring(lo)): did the server's time grow by more?"""
    ps = [a / b for a, b in zip(_times(rows, "ps", hi), _times(rows, "ps", lo))]
    ring = [a / b for a, b in zip(_times(rows, "ring", hi), _times(rows, "ring", lo))]
    r = paired.ratio(ps, ring)
    head = (f"the parameter server's growth from W={lo} to W={hi} against the ring's growth (the ratio "
            f"of the two growth factors, per pass)")
    if r.n < 2:
        return f"{head}: {r.geo:.2f}x in the one pass, {INCONCLUSIVE}: one pass gives no interval."
    body = f"{r.geo:.2f}x (95 % CI {r.lo:.2f}-{r.hi:.2f}x over {r.n} paired passes)"
    if r.decided:
        return f"{head}: {body}: {'the parameter server' if r.lo > 1 else 'the ring'} grew by the larger factor."
    return (f"{head}: {body}: {INCONCLUSIVE}, the interval includes 1x (which form grows faster is not "
            f"decided){paired.why(r)}.")


def _shared_cores(rows: list[dict]) -> list[str]:
    """Why the run cannot test the model's growth with W when the launch had fewer cores."""
    r = rows[-1]
    procs, cores = r.get("processes"), r.get("cores")
    if not procs or not cores or procs <= cores:
        return []
    ws = sorted({x["workers"] for x in rows})
    return [f"This run cannot test how the model grows with W: every W ({', '.join(map(str, ws))}) ran "
            f"inside one launch of {procs} processes (1 server + {procs - 1} workers; the ranks a W does not "
            f"use wait) on the {cores} CPU core(s) the ranks saw, so a rank also waits for a core and the "
            f"copies of the other ranks' messages run on the same cores; the model counts messages on "
            f"links that work in parallel, one core per rank. On a node with at least {procs} cores the "
            f"comparison means what it says."]


def alpha_line(summary: dict, alpha_two_ranks: float, beta_two_ranks: float | None = None) -> str:
    """The ping-pong α and β of this launch (the model's) beside section 3's 2-rank ping-pong ones."""
    a, b = summary["alpha_s"], summary.get("beta_s_per_byte") or 0.0
    if not alpha_two_ranks > 0:
        return f"the model's α here: {a * 1e6:.3g} µs (section 3's ping-pong α was not resolved)"
    line = (f"the model's α here, {a * 1e6:.3g} µs, is a ping-pong inside this launch of "
            f"{summary['world_size']} processes on {summary.get('cores')} core(s); section 3's ping-pong on 2 "
            f"ranks gave {alpha_two_ranks * 1e6:.3g} µs: {a / alpha_two_ranks:.2f}x")
    if beta_two_ranks and b > 0:
        line += (f"; its bandwidth 1/β = {1 / b / 1e9:.3g} GB/s against section 3's {1 / beta_two_ranks / 1e9:.3g} "
                 f"GB/s: {beta_two_ranks / b:.2f}x (α alone does not make the two fits alike)")
    return line


def fit_lines(summary: dict) -> list[str]:
    """How disturbed this launch's passes were, and whether the ping-pong fit behind the model
    column describes its own points (`fitcheck.USABLE_FOLD`); the verdicts against the model above
    mean only as much as that fit."""
    from dltutor.allreduce import cost, fitcheck
    rows = [dict(r, algorithm=f"{r['form']} W={r['workers']}") for r in summary["results"]]
    out = [paired.disturbance_line(rows, f"section 8a, {summary['world_size']} processes", summary.get("load"))]
    pp = summary.get("pingpong") or []
    if not pp:
        return out + ["this launch did not record its ping-pong points, so whether its α-β fit describes "
                      "them cannot be checked: read the model column and the verdicts against it above as "
                      "unchecked"]
    a, b = summary["alpha_s"], summary["beta_s_per_byte"]
    folds = cost.fold([(a + p["bytes"] * b) / p["time_s"] for p in pp])
    worst = int(folds.argmax())
    head = (f"the ping-pong fit behind the model column misses its own points by up to {folds[worst]:.2g}x "
            f"(at {pp[worst]['bytes']:,} bytes)")
    if folds[worst] > fitcheck.USABLE_FOLD:
        return out + [f"{head}: beyond the {fitcheck.USABLE_FOLD:.2g}x rule, so the fit does not describe this "
                      f"launch and the verdicts against the model above are not tests of the model"]
    return out + [f"{head}: within the {fitcheck.USABLE_FOLD:.2g}x rule"]
