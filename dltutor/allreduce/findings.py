"""What notebook 05's measurements show, as sentences built from the run's own rows.

Each function takes lab summaries (`collectives.measure_allreduce`, `hierarchical.measure_hierarchical`)
and returns sentences for `dltutor.core.findings.show`. A measured time in a comparison is the mean
over a size's passes (`times_s`) and its "±" the 95 % confidence interval of that mean
(`sweep.pass_mean_ci`, `dltutor.core.spread`); two times whose gap is inside their intervals
combined are "inconclusive here", and one pass gives no interval (inconclusive too).

- `fit_findings(summary, fits)`: whether the ring's minimax fit is usable (`fitcheck.check`); if
  so, the ring's fitted α beside the ping-pong's and whether the other algorithms' model lines
  (drawn with the ring's α, β) sit above or below their smallest-message points; always the
  largest model error of each algorithm over the sizes.
- `pair_findings(summary, a, b, alpha, beta, usable)`: a against b at the smallest and the largest
  size, beside the model's prediction of their ratio there (none from an unusable fit).
- `winner_findings(summary)`: the fastest algorithm per size against the runner-up.
- `hierarchical_findings(summary)`: the 2-D all-reduce against the flat ring and dist.all_reduce per
  size, and the α-β model of both (α, β fitted to this launch's own flat ring, if usable).
"""
from __future__ import annotations

from dltutor.allreduce import cost, fitcheck
from dltutor.allreduce.sweep import pass_mean_ci
from dltutor.core import spread
from dltutor.core.findings import INCONCLUSIVE, against, compare, differs
from dltutor.core.units import fmt_bytes

US = 1e6   # seconds -> µs
RESOLVED = 1e-9   # a fitted α below 1 ns is the fit's rounding, not a latency


def _rows(summary: dict, algorithm: str) -> list[dict]:
    return sorted((r for r in summary["results"] if r["algorithm"] == algorithm), key=lambda r: r["bytes"])


def _mean(row: dict) -> float:
    """The mean time over the row's passes (s)."""
    return pass_mean_ci(row)[0]


def _spread(row: dict) -> float:
    """95 % CI half-width of that mean (s); nan with one pass."""
    return pass_mean_ci(row)[1]


def _at(summary: dict, algorithm: str, nbytes: int) -> dict:
    return next(r for r in summary["results"] if r["algorithm"] == algorithm and r["bytes"] == nbytes)


def _vs(summary: dict, a: str, b: str, nbytes: int) -> str:
    ra, rb = _at(summary, a, nbytes), _at(summary, b, nbytes)
    return compare(a, _mean(ra) * US, b, _mean(rb) * US, unit="µs",
                   spread_a=_spread(ra) * US, spread_b=_spread(rb) * US)


def fit_findings(summary: dict, fits: dict) -> list[str]:
    """Whether the ring's minimax fit is usable; if so, α from the ring vs α from the ping-pong and
    the model lines vs the smallest measured points; the largest model error per algorithm.
    `fits` is `cost.compare_fits(summary)`."""
    alpha, beta, _ = fits["ring, minimax"]
    chk = fitcheck.check(summary, alpha, beta)
    out = [chk["line"]] + (_alpha_lines(summary, fits) if chk["usable"] else [])
    n = summary["world_size"]
    for alg in ("ring", "reduce_bcast", "recursive_doubling"):
        if _rows(summary, alg):
            err = cost.model_errors(summary, alg, alpha, beta)
            sizes = cost.times_of(summary, alg)[0]
            out.append(f"{alg}: the model with the ring's minimax α, β is within {err.max():.0%} of the "
                       f"measured time at every size (worst at {fmt_bytes(sizes[err.argmax()])}), N = {n}")
    return out


def _alpha_lines(summary: dict, fits: dict) -> list[str]:
    """The ring's α against the ping-pong's; the other algorithms' model lines against their
    smallest-message points (from a usable fit only)."""
    n = summary["world_size"]
    alpha, beta, _ = fits["ring, minimax"]
    alpha_pp = fits["ping-pong, lsq"][0]
    d = cost.times_of(summary, "ring")[0]
    ring_a, ring_h = _pass_alphas(_rows(summary, "ring"), "ring", n, "minimax")
    pp_a, pp_h = _pass_alphas(sorted(summary.get("pingpong") or [], key=lambda r: r["bytes"]),
                              "pingpong", 2, "lsq")
    if alpha_pp > RESOLVED:
        out = [compare("the ring's α", ring_a * US, "the ping-pong's α", pp_a * US, unit="µs",
                       spread_a=ring_h * US, spread_b=pp_h * US).rstrip(".")
               + "; each α is the mean of one fit per pass, ± the 95 % CI over those fits"]
    else:
        out = [f"the ping-pong's α is not resolved by these sizes (its fit gives less than 1 ns); the ring's "
               f"fitted α is {alpha * US:.3g} µs"]
    smallest = int(d[0])
    for alg in ("reduce_bcast", "recursive_doubling"):
        if not _rows(summary, alg):
            continue
        row = _at(summary, alg, smallest)
        model = float(cost.model_time(alg, n, smallest, alpha, beta))
        name, source = f"{alg} at {fmt_bytes(smallest)} (mean of passes)", "its model line (the ring's α, β)"
        if not spread.decided(_spread(row)):
            out.append(f"{name}: {_mean(row) * US:.3g} µs measured vs {model * US:.3g} µs from {source}: "
                       f"{INCONCLUSIVE}, one pass gives no interval to judge the gap with.")
            continue
        out.append(against(name, _mean(row) * US, model * US, tolerance=_spread(row) * US, unit="µs",
                           source=source))
    return out


def _pass_alphas(rows: list[dict], algorithm: str, n: int, criterion: str) -> tuple[float, float]:
    """(mean, 95 % CI) of α fitted to each pass on its own (pass p: the p-th time of every size);
    (nan, nan) without at least two passes of every size."""
    passes = min((len(r.get("times_s") or []) for r in rows), default=0)
    if len(rows) < 2 or passes < 2:
        return float("nan"), float("nan")
    sizes = [r["bytes"] for r in rows]
    alphas = [cost.fit_alpha_beta(sizes, [r["times_s"][p] for r in rows], algorithm, n,
                                  criterion=criterion)[0] for p in range(passes)]
    return spread.mean_and_ci(alphas)


def pair_findings(summary: dict, a: str, b: str, alpha: float, beta: float, usable: bool = True) -> list[str]:
    """`a` against `b` at the smallest and the largest measured size, with the model's ratio there
    (`usable`: whether the fit of alpha, beta passed `fitcheck.check`; if not, no ratio)."""
    n = summary["world_size"]
    sizes = sorted({r["bytes"] for r in _rows(summary, a)} & {r["bytes"] for r in _rows(summary, b)})
    out = []
    for d in sorted({sizes[0], sizes[-1]}):
        ratio = float(cost.model_time(a, n, d, alpha, beta) / cost.model_time(b, n, d, alpha, beta))
        model = (f"The model predicts {a} = {ratio:.2f}x {b} here." if usable else
                 "No model ratio: the fit is unusable (above).")
        out.append(f"N = {n}, D = {fmt_bytes(d)}: {_vs(summary, a, b, d)} {model}")
    return out


def winner_findings(summary: dict) -> list[str]:
    """Per size: the fastest algorithm (mean over passes) against the runner-up, or INCONCLUSIVE
    within their 95 % intervals."""
    n, out = summary["world_size"], []
    for d in sorted({r["bytes"] for r in summary["results"]}):
        first, second = sorted((r for r in summary["results"] if r["bytes"] == d), key=_mean)[:2]
        gap = differs(_mean(first), _mean(second), _spread(first), _spread(second))
        head = (f"N = {n}, D = {fmt_bytes(d)}: fastest {first['algorithm']}" if gap else
                f"N = {n}, D = {fmt_bytes(d)}: no single winner ({INCONCLUSIVE})")
        out.append(f"{head}; {_vs(summary, first['algorithm'], second['algorithm'], d)}")
    return out


def hierarchical_findings(summary: dict) -> list[str]:
    """The 2-D all-reduce against the flat ring and dist.all_reduce, measured and modelled."""
    n, per_node, nodes = summary["world_size"], summary["per_node"], summary["nodes"]
    alpha, beta = cost.fit_summary(summary, "ring", "minimax")
    chk = fitcheck.check(summary, alpha, beta)
    out = ["groups reported by the ranks: " + "; ".join(
        f"rank {r}: intra {g['intra']}, inter {g['inter']}" for r, g in sorted(summary.get("groups", {}).items()))]
    out += [f"hierarchical result equal to dist.all_reduce (int64 exactly, float32 allclose): "
            f"{all(summary['checks'].values())}", chk["line"].replace("the ring's", "this launch's flat ring's")]
    for d in sorted({r["bytes"] for r in summary["results"]}):
        model = float(cost.hierarchical_time(nodes, per_node, d, (alpha, beta), (alpha, beta))
                      / cost.flat_ring_time(nodes, per_node, d, (alpha, beta), (alpha, beta)))
        said = (f"The model (one machine: all links alike, α, β fitted to this launch's flat ring) "
                f"predicts hierarchical = {model:.2f}x ring." if chk["usable"] else
                "No model ratio: the flat ring's fit is unusable (above).")
        out.append(f"D = {fmt_bytes(d)}: {_vs(summary, 'hierarchical', 'ring', d)} "
                   f"{_vs(summary, 'hierarchical', 'gloo', d)} {said}")
    return out
