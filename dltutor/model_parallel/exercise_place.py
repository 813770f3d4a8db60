"""Notebook 06's exercise `06-placement`: rank -> (tp, pp, dp) for any cluster shape.

The student writes `place(rank, tp, pp, dp, gpus_per_node)` in the notebook. `check(place)` runs
it, in the kernel, on cluster shapes the notebook never shows (`SHAPES`, plus `DRAWN` more drawn
at random for each check) and judges, shape by shape, what a placement must be:

  - three whole numbers (tp, pp, dp) per rank: ints or numpy integers; a float (even 2.0, what `/`
    gives where `//` was meant) is refused, by `dltutor.grading.numbers.as_int`;
  - each coordinate in its range (0 .. tp-1, 0 .. pp-1, 0 .. dp-1) and every (tp, pp, dp) given
    to exactly one rank;
  - every TP group inside one node (`mesh.check_placement`), since TP all-reduces every layer.

The first failing shape is named with what fails there: the float and the rank that got it, the
coordinate out of range (and, when the three numbers are in the reverse order, that), two ranks
with the same coordinates, or a TP group that spans nodes (its ranks and nodes) and which
coordinate changes fastest in the student's layout. Most shapes are not square (in several, tp,
pp and dp all differ), so a function that mixes up the three sizes fails; one written for seed
001's 32-GPU job alone fails on the others. `seed_case(place)` then answers seed 001's question (4 nodes x
8 GPUs, TP = 4, PP = 4, DP = 2) with the student's function: the node map and where the
pipeline's sends cross nodes, beside the reference layout's.
"""
from __future__ import annotations

import importlib.util
import random

from dltutor.core import course
from dltutor.grading.numbers import as_int, kind
from dltutor.grading.verdict import from_problems, not_yet
from dltutor.model_parallel import mesh as M

EXERCISE = "06-placement"
SOLUTION = "06_model_parallel/solutions/place.py"
SHAPES = (M.Cluster(nodes=2, gpus_per_node=4, tp=2, pp=2, dp=2),
          M.Cluster(nodes=8, gpus_per_node=8, tp=8, pp=4, dp=2),
          M.Cluster(nodes=4, gpus_per_node=4, tp=4, pp=2, dp=2),
          M.Cluster(nodes=3, gpus_per_node=4, tp=2, pp=3, dp=2),
          M.Cluster(nodes=2, gpus_per_node=8, tp=1, pp=4, dp=4),
          M.Cluster(nodes=4, gpus_per_node=2, tp=2, pp=4, dp=1),
          M.Cluster(nodes=6, gpus_per_node=4, tp=2, pp=3, dp=4),
          M.Cluster(nodes=3, gpus_per_node=8, tp=4, pp=2, dp=3))
DRAWN = 2
SEED_CASE = M.Cluster(nodes=4, gpus_per_node=8, tp=4, pp=4, dp=2)   # seed 001's job


def describe(c: M.Cluster) -> str:
    return f"{c.nodes} nodes x {c.gpus_per_node} GPUs, TP={c.tp} PP={c.pp} DP={c.dp}"


def draw(rng: random.Random) -> M.Cluster:
    """A random valid shape: TP divides a node, PP x DP fills the rest of the GPUs."""
    gpus = rng.choice((2, 4, 8))
    nodes = rng.randint(1, 6)
    tp = rng.choice([t for t in (1, 2, 4, 8) if gpus % t == 0])
    rest = nodes * gpus // tp
    pp = rng.choice([p for p in range(1, rest + 1) if rest % p == 0])
    return M.Cluster(nodes=nodes, gpus_per_node=gpus, tp=tp, pp=pp, dp=rest // pp)


def shapes(seed: int | None = None) -> list[M.Cluster]:
    """`SHAPES` and `DRAWN` random ones (never seed 001's job: the notebook shows it)."""
    rng, drawn = random.Random(seed), []
    while len(drawn) < DRAWN:
        c = draw(rng)
        drawn += [] if c == SEED_CASE or c in SHAPES else [c]
    return list(SHAPES) + drawn


def on(place, c: M.Cluster):
    """`place` as the rank -> (tp, pp, dp) function of cluster `c` (what `check_placement` runs)."""
    return lambda rank: place(rank, c.tp, c.pp, c.dp, c.gpus_per_node)


# ------------------------------------------------------------------ what `place` returned
def coordinates(place, c: M.Cluster) -> tuple[dict, str | None]:
    """({rank: (t, p, d)} as ints, None), or ({}, what is wrong with the first bad return)."""
    coords = {}
    for rank in range(c.world):
        try:
            got = place(rank, c.tp, c.pp, c.dp, c.gpus_per_node)
        except Exception as exc:  # noqa: BLE001 - the student's code: name it, never crash
            return {}, (f"place({rank}, {c.tp}, {c.pp}, {c.dp}, {c.gpus_per_node}) raised "
                        f"{type(exc).__name__}: {exc}")
        try:
            values = list(got)
        except TypeError:
            values = []
        if len(values) != 3:
            return {}, (f"place({rank}, ...) returned {kind(got)}: return three whole numbers, "
                        "(tp, pp, dp)")
        ints = [as_int(v) for v in values]
        bad = [v for v, i in zip(values, ints) if i is None]
        if bad:
            why = ("coordinates are whole numbers: use // (floor division), not /, and keep them "
                   "ints" if any(isinstance(getattr(v, "real", v), float) or "float" in
                                 str(getattr(v, "dtype", "")) for v in bad)
                   else "return three whole numbers (ints)")
            return {}, f"place({rank}, ...) returned {kind(bad[0])} among {kind(got)}: {why}"
        coords[rank] = tuple(ints)
    return coords, None


def _grid_problem(coords: dict, c: M.Cluster) -> str | None:
    """A coordinate out of its range, or two ranks with the same (tp, pp, dp)."""
    sizes = (c.tp, c.pp, c.dp)
    for rank, xyz in coords.items():
        for axis, v, n in zip(M.AXES, xyz, sizes):
            if not 0 <= v < n:
                hint = ""
                rev = tuple(reversed(xyz))
                if all(0 <= u < m for u, m in zip(rev, sizes)) and all(
                        all(0 <= u < m for u, m in zip(reversed(t), sizes))
                        for t in coords.values()):
                    hint = ": the numbers fit (dp, pp, tp): return them in the order (tp, pp, dp)"
                return (f"rank {rank} got {axis} = {v}, but {axis} counts 0 .. {n - 1} "
                        f"({axis.upper()} = {n}){hint}")
    first = {}
    for rank, xyz in coords.items():
        if xyz in first:
            return (f"ranks {first[xyz]} and {rank} both got (tp, pp, dp) = {xyz}: each "
                    "coordinate triple belongs to exactly one rank")
        first[xyz] = rank
    return None


def _fastest(coords: dict, c: M.Cluster) -> str | None:
    """Which coordinate changes from rank 0 to rank 1 in the student's layout."""
    if c.world < 2:
        return None
    changed = [axis for axis, x, y in zip(M.AXES, coords[0], coords[1]) if x != y]
    return "/".join(changed) or None


def _tp_detail(coords: dict, c: M.Cluster) -> str:
    split = [g for g in M.groups(coords, "tp") if len({M.node_of(r, c) for r in g}) > 1]
    g = split[0]
    nodes = sorted({M.node_of(r, c) for r in g})
    fast = _fastest(coords, c)
    return (f"e.g. the TP group of ranks {g[:8]}{' ...' if len(g) > 8 else ''} is on nodes "
            f"{nodes}" + (f"; from rank 0 to rank 1 your {fast} changes: launchers number a "
                          "node's GPUs consecutively, so the coordinate that changes fastest "
                          "stays inside a node" if fast and fast != "tp" else ""))


def _reversed_hint(coords: dict, c: M.Cluster) -> str:
    """When the triples read backwards are a good placement: the order is the mistake."""
    flipped = {r: tuple(reversed(xyz)) for r, xyz in coords.items()}
    sizes = (c.tp, c.pp, c.dp)
    if all(0 <= v < n for xyz in flipped.values() for v, n in zip(xyz, sizes)) and \
            M.check_placement(lambda r: flipped[r], c)["ok"]:
        return ("; read backwards, your numbers are a good placement: return them in the order "
                "(tp, pp, dp)")
    return ""


def judge(place, clusters) -> tuple[list[str], str]:
    """(problems, summary): the first shape where `place` fails, and what fails there."""
    for c in clusters:
        where = f"on {describe(c)} (node = rank // {c.gpus_per_node}):"
        coords, bad = coordinates(place, c)
        bad = bad or _grid_problem(coords, c)
        if bad:
            return [where, bad], ""
        result = M.check_placement(lambda r: coords[r], c)
        if not result["ok"]:
            detail = _tp_detail(coords, c) + _reversed_hint(coords, c)
            return [where, *result["problems"], detail], ""
    return [], (f"a valid placement (whole numbers, every (tp, pp, dp) once) with every TP group "
                f"inside a node on all {len(clusters)} shapes: "
                + "; ".join(describe(c) for c in clusters))


def reference_place():
    """The course's `place`, from the hidden solution file."""
    spec = importlib.util.spec_from_file_location("solution_place", course.lab(SOLUTION))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.place


def verdict(place, seed: int | None = None, reference: bool = False):
    """The `Verdict` on `place` (not shown): not yet while it raises NotImplementedError."""
    try:
        place(0, 2, 2, 2, 4)
    except NotImplementedError as exc:
        return not_yet(EXERCISE, f"place still raises NotImplementedError ({exc}): write it and "
                       "run its cell, then this check", reference=reference)
    except Exception:   # noqa: BLE001 - the student's bug: `coordinates` names it per shape
        pass
    problems, summary = judge(place, shapes(seed))
    return from_problems(EXERCISE, problems, summary + ".", reference=reference)


def check(place=None, solution: bool = False, seed: int | None = None) -> bool:
    """Run `place(rank, tp, pp, dp, gpus_per_node)` on unseen shapes; show the verdict."""
    if solution:
        place = reference_place()
    return verdict(place, seed, reference=solution).show()


def seed_case(place) -> tuple[list[dict], str]:
    """Seed 001's 32-GPU job under `place`: the node map and the crossing summary."""
    c = SEED_CASE
    fn = on(place, c)
    return M.node_map(fn, c), M.verdict(M.check_placement(fn, c))
