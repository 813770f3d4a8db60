"""α-β cost models of all-reduce, their least-squares fit, and nccl-tests' algbw / busbw.

A message of n bytes costs alpha + n * beta: alpha is the latency (s), beta the inverse bandwidth
(s/byte). D is the size of the vector being all-reduced, N the number of ranks. On CPUs beta also
absorbs the cost of adding the numbers (the reduction), which a pure network model leaves out.

| algorithm                    | modelled time T                                |
|------------------------------|------------------------------------------------|
| ring                         | 2(N-1)·alpha + 2(N-1)/N·D·beta                 |
| reduce + broadcast (linear,  | 2(N-1)·(alpha + D·beta): the root talks to     |
|   i.e. a parameter server)   |   every other rank in turn, twice              |
| recursive doubling           | ⌈log2 N⌉·(alpha + D·beta), +2(alpha + D·beta)  |
|                              |   when N is not a power of two                 |
| tree (binomial reduce + bcast)| 2⌈log2 N⌉·(alpha + D·beta)                    |
| pipelined double binary tree | ≈ 2⌈log2 N⌉·alpha + 2·D·beta (NCCL's tree; the |
|                              |   pipeline fill is left out)                   |
"""
from __future__ import annotations

import math

import numpy as np



def _log2ceil(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


def coefficients(algorithm: str, n: int, nbytes: float) -> tuple[float, float]:
    """(a, b) such that the algorithm's modelled time is a·alpha + b·beta for D = nbytes."""
    n, d = int(n), float(nbytes)
    if n <= 1:
        return 0.0, 0.0
    if algorithm == "ring":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n * d
    if algorithm in ("reduce_bcast", "ps"):
        return 2.0 * (n - 1), 2.0 * (n - 1) * d
    if algorithm == "recursive_doubling":
        k = int(math.log2(n)) + (0 if _is_pow2(n) else 2)
        return float(k), k * d
    if algorithm == "tree":
        k = 2 * _log2ceil(n)
        return float(k), k * d
    if algorithm == "tree_pipelined":
        return 2.0 * _log2ceil(n), 2.0 * d
    if algorithm == "pingpong":  # one way: one message of D bytes
        return 1.0, d
    raise ValueError(f"unknown algorithm {algorithm!r}; one of {ALGORITHMS}")


ALGORITHMS = ("ring", "reduce_bcast", "recursive_doubling", "tree", "tree_pipelined")


def model_time(algorithm: str, n: int, nbytes, alpha: float, beta: float):
    """Modelled time (s) of `algorithm` on `n` ranks for D = `nbytes` (scalar or sequence)."""
    if np.ndim(nbytes):
        return np.array([model_time(algorithm, n, d, alpha, beta) for d in nbytes])
    a, b = coefficients(algorithm, n, nbytes)
    return a * alpha + b * beta


def ring_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """T = 2(N-1)·alpha + 2(N-1)/N·D·beta, the TACC slide's formula."""
    return model_time("ring", n, nbytes, alpha, beta)


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth D / T in bytes/s (nccl-tests' 'algbw')."""
    return nbytes / seconds  # scalars or numpy arrays


def busbw(nbytes: float, seconds: float, n: int) -> float:
    """Bus bandwidth for all-reduce: algbw · 2(N-1)/N (nccl-tests' 'busbw').

    It is the rate each rank's link must carry under a ring, so it is comparable across N and with
    the hardware's peak; for N = 1 nothing moves and busbw is 0.
    """
    return algbw(nbytes, seconds) * 2.0 * (n - 1) / n


def fit_alpha_beta(nbytes, seconds, algorithm: str = "pingpong", n: int = 2,
                   relative: bool = True, criterion: str = "lsq") -> tuple[float, float]:
    """alpha (s) and beta (s/byte) fitted to measured times at several sizes.

    Each measurement says t ≈ a·alpha + b·beta with (a, b) = coefficients(algorithm, n, D).
    With `relative=True` (default) each row is divided by its t, so the fit weighs *relative*
    errors and a 1 KiB point counts as much as a 64 MiB one. `criterion` 'lsq' minimises the sum
    of their squares; 'minimax' the largest one (a Chebyshev fit, by Lawson's reweighting), the
    right choice when the question is "within X% at every size". Both results are kept >= 0.
    """
    d = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if d.shape != t.shape or d.size < 2:
        raise ValueError("need at least two (size, time) pairs of equal length")
    if np.any(t <= 0):
        raise ValueError("times must be positive")
    if criterion not in ("lsq", "minimax"):
        raise ValueError(f"criterion must be 'lsq' or 'minimax', not {criterion!r}")
    A = np.array([coefficients(algorithm, n, x) for x in d])
    w = 1.0 / t if relative else np.ones_like(t)
    Aw, tw = A * w[:, None], t * w
    if criterion == "minimax":
        alpha, beta = _lawson_minimax(Aw, tw)
    else:
        (alpha, beta), *_ = np.linalg.lstsq(Aw, tw, rcond=None)
    if alpha < 0:  # latency not resolvable: pure bandwidth fit
        alpha, beta = 0.0, float(np.dot(Aw[:, 1], tw) / np.dot(Aw[:, 1], Aw[:, 1]))
    if beta < 0:   # bandwidth not resolvable: pure latency fit
        alpha, beta = float(np.dot(Aw[:, 0], tw) / np.dot(Aw[:, 0], Aw[:, 0])), 0.0
    return float(alpha), float(beta)


def _lawson_minimax(A, y, rounds: int = 500) -> tuple[float, float]:
    """x minimising max |A x - y| (Lawson 1961: weighted least squares, each weight multiplied
    by its residual every round); the best x seen is returned."""
    weights = np.full(len(y), 1.0 / len(y))
    best, best_err = None, np.inf
    for _ in range(rounds):
        root = np.sqrt(weights)
        x, *_ = np.linalg.lstsq(A * root[:, None], y * root, rcond=None)
        resid = np.abs(A @ x - y)
        if resid.max() < best_err - 1e-12:
            best, best_err = x, resid.max()
        weights = weights * resid
        total = weights.sum()
        if best_err < 1e-12 or not np.isfinite(total) or total <= 0:  # exact, or nothing to move
            break
        weights /= total
    return float(best[0]), float(best[1])


def relative_errors(measured, modelled) -> np.ndarray:
    """|model - measured| / measured for each size."""
    m = np.asarray(measured, dtype=float)
    return np.abs(np.asarray(modelled, dtype=float) - m) / m


def crossover_bytes(alg_a: str, alg_b: str, n: int, alpha: float, beta: float) -> float | None:
    """The size D at which `alg_a` and `alg_b` take equal modelled time (None if they never do)."""
    a1, b1 = coefficients(alg_a, n, 1.0)
    a2, b2 = coefficients(alg_b, n, 1.0)
    if abs((b1 - b2) * beta) < 1e-300:
        return None
    d = (a2 - a1) * alpha / ((b1 - b2) * beta)
    return float(d) if d > 0 else None


def times_of(summary: dict, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, seconds) of one algorithm in a lab summary, sorted by size."""
    rows = sorted((r["bytes"], r["time_s"]) for r in summary["results"] if r["algorithm"] == algorithm)
    return np.array([r[0] for r in rows], float), np.array([r[1] for r in rows], float)


def fit_summary(summary: dict, source: str = "ring", criterion: str = "lsq") -> tuple[float, float]:
    """alpha, beta fitted from a lab summary: `source` = 'pingpong' or an all-reduce algorithm."""
    n = summary["world_size"]
    if source == "pingpong":
        pp = summary["pingpong"]
        return fit_alpha_beta([p["bytes"] for p in pp], [p["time_s"] for p in pp],
                              criterion=criterion)
    d, t = times_of(summary, source)
    return fit_alpha_beta(d, t, algorithm=source, n=n, criterion=criterion)


def model_errors(summary: dict, algorithm: str, alpha: float, beta: float) -> np.ndarray:
    """|model - measured| / measured at each size of `algorithm` in a lab summary."""
    d, t = times_of(summary, algorithm)
    return relative_errors(t, model_time(algorithm, summary["world_size"], d, alpha, beta))


def model_folds(summary: dict, algorithm: str, alpha: float, beta: float) -> np.ndarray:
    """model / measured at each size of `algorithm` (> 1: the model is too high, < 1: too low)."""
    d, t = times_of(summary, algorithm)
    return np.asarray(model_time(algorithm, summary["world_size"], d, alpha, beta), float) / t


def fold(ratios) -> np.ndarray:
    """The symmetric miss of model/measured ratios: max(m/t, t/m), 1 = exact, 2 = off by 2x either way."""
    r = np.asarray(ratios, float)
    return np.where(r > 0, np.maximum(r, 1 / np.where(r > 0, r, 1)), np.inf)


FITS = {"ping-pong, lsq": ("pingpong", "lsq"), "ping-pong, minimax": ("pingpong", "minimax"),
        "ring, lsq": ("ring", "lsq"), "ring, minimax": ("ring", "minimax")}


def compare_fits(summary: dict) -> dict:
    """name -> (alpha, beta, the ring model's relative error at each size) for each of FITS:
    the ping-pong's fit predicts the ring, the ring's own fits describe it."""
    out = {}
    for name, (source, criterion) in FITS.items():
        alpha, beta = fit_summary(summary, source, criterion)
        out[name] = (alpha, beta, model_errors(summary, "ring", alpha, beta))
    return out


def best_algorithm(n: int, nbytes: float, alpha: float, beta: float, algorithms=ALGORITHMS) -> str:
    """The algorithm with the smallest modelled time for N = n ranks and D = nbytes."""
    return min(algorithms, key=lambda a: model_time(a, n, nbytes, alpha, beta))


# ---- two kinds of links: the hierarchical (2-D) all-reduce on M nodes x L ranks (seed 004's "2D-torus")
def hierarchical_time(nodes: int, per_node: int, nbytes, intra, inter):
    """Modelled time of the 2-D all-reduce on N = M·L ranks (M = `nodes`, L = `per_node`); `intra`
    and `inter` are the (alpha, beta) of the links inside a node and between nodes:
    ring reduce-scatter inside the node, ring all-reduce of each D/L shard across the nodes, ring
    all-gather inside the node:
      T = 2(L-1)·(α_intra + D/L·β_intra) + 2(M-1)·α_inter + 2(M-1)/M·(D/L)·β_inter
    """
    (ai, bi), (ao, bo) = intra, inter
    m, l, d = int(nodes), int(per_node), np.asarray(nbytes, dtype=float)
    return 2 * (l - 1) * (ai + d / l * bi) + 2 * (m - 1) * ao + 2 * (m - 1) / m * (d / l) * bo


def flat_ring_time(nodes: int, per_node: int, nbytes, intra, inter):
    """Modelled time of one ring over all N = M·L ranks, numbered node by node. Every step moves D/N
    on every link at once and ends when its slowest link does (once M > 1 the ring has both kinds):
      T = 2(N-1)·max over the ring's links of (α + D/N·β); one node (M = 1): `intra` only."""
    n, d = int(nodes) * int(per_node), np.asarray(nbytes, dtype=float)
    step = [alpha + d / n * beta for alpha, beta in ((intra, inter) if nodes > 1 else (intra,))]
    return 2 * (n - 1) * np.maximum.reduce(step) if len(step) > 1 else 2 * (n - 1) * step[0]


def hierarchical_saving(nodes: int, per_node: int, nbytes, intra, inter):
    """flat ring time - hierarchical time (> 0: the 2-D all-reduce wins). When the links between
    nodes are the slower ones at D, it works out (M > 1) as
      2(L-1)·(M·α_inter - α_intra) + 2(L-1)/L·D·(β_inter - β_intra):
    the 2-D scheme wins at every size when the links inside a node are at least as fast as those
    between nodes; it saves latency steps even when all links are alike."""
    return (flat_ring_time(nodes, per_node, nbytes, intra, inter)
            - hierarchical_time(nodes, per_node, nbytes, intra, inter))


CROSSOVER_GRID = np.logspace(0, 50, 501, base=2.0)   # 1 B ... 1 PiB, where a sign change is looked for


def hierarchical_crossover(nodes: int, per_node: int, intra, inter) -> float | None:
    """The size D where the flat ring and the 2-D all-reduce take equal modelled time (M > 1), found
    where the saving changes sign on CROSSOVER_GRID and refined by bisection; None when it never does."""
    if nodes < 2 or per_node < 2:
        return None
    s = hierarchical_saving(nodes, per_node, CROSSOVER_GRID, intra, inter)
    change = np.nonzero(np.sign(s[:-1]) != np.sign(s[1:]))[0]
    if not len(change):
        return None
    lo, hi = CROSSOVER_GRID[change[0]], CROSSOVER_GRID[change[0] + 1]
    sign_lo = np.sign(s[change[0]])
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.sign(hierarchical_saving(nodes, per_node, mid, intra, inter)) == sign_lo else (lo, mid)
    return float((lo + hi) / 2)


def hierarchical_rows(nodes: int, per_node: int, sizes, intra, inter) -> list[dict]:
    """Per size: the modelled flat ring and 2-D times (ms) and their ratio (> 1: 2-D is faster)."""
    rows = []
    for d in sizes:
        flat = float(flat_ring_time(nodes, per_node, d, intra, inter))
        two_d = float(hierarchical_time(nodes, per_node, d, intra, inter))
        rows.append({"D": d, "flat ring (ms)": flat * 1e3, "2-D (ms)": two_d * 1e3, "flat / 2-D": flat / two_d})
    return rows


def hierarchical_verdict(nodes: int, per_node: int, intra, inter) -> str:
    """What the model says about 2-D vs the flat ring on `nodes` x `per_node` ranks, in words."""
    from dltutor.core.units import fmt_bytes
    x = hierarchical_crossover(nodes, per_node, intra, inter)
    small = hierarchical_saving(nodes, per_node, 1.0, intra, inter) > 0
    if x is None:
        return f"by the model the {'2-D all-reduce' if small else 'flat ring'} is faster at every size"
    first, then = ("the 2-D all-reduce", "the flat ring") if small else ("the flat ring", "the 2-D all-reduce")
    return f"by the model {first} is faster below D = {fmt_bytes(x)}, {then} above it"
