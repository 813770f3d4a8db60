"""Notebook 06's exercise `06-placement`: rank -> (tp, pp, dp) for any cluster shape.

The student writes `place(rank, tp, pp, dp, gpus_per_node)` in the notebook. `check(place)` runs
it, in the kernel, on cluster shapes the notebook never shows (`SHAPES`, plus `DRAWN` more drawn
at random for each check) with `mesh.check_placement`: every (tp, pp, dp) exactly once, and every
TP group inside one node. The first failing shape is named with what fails there: the
coordinate that is missing or doubled, or a TP group that spans nodes (its ranks and nodes) and
which coordinate changes fastest in the student's layout. A function written for seed 001's
32-GPU job alone fails on the others. `seed_case(place)` then answers seed 001's question
(4 nodes x 8 GPUs, TP = 4, PP = 4, DP = 2) with the student's function: the node map and where
the pipeline's sends cross nodes, beside the reference layout's.
"""
from __future__ import annotations

import importlib.util
import random

from dltutor.core import course
from dltutor.grading.verdict import from_problems, not_yet
from dltutor.model_parallel import mesh as M

EXERCISE = "06-placement"
SOLUTION = "06_model_parallel/solutions/place.py"
SHAPES = (M.Cluster(nodes=2, gpus_per_node=4, tp=2, pp=2, dp=2),
          M.Cluster(nodes=8, gpus_per_node=8, tp=8, pp=4, dp=2),
          M.Cluster(nodes=4, gpus_per_node=4, tp=4, pp=2, dp=2),
          M.Cluster(nodes=3, gpus_per_node=4, tp=2, pp=3, dp=2),
          M.Cluster(nodes=2, gpus_per_node=8, tp=1, pp=4, dp=4),
          M.Cluster(nodes=4, gpus_per_node=2, tp=2, pp=4, dp=1))
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
        drawn += [] if c == SEED_CASE else [c]
    return list(SHAPES) + drawn


def on(place, c: M.Cluster):
    """`place` as the rank -> (tp, pp, dp) function of cluster `c` (what `check_placement` runs)."""
    return lambda rank: place(rank, c.tp, c.pp, c.dp, c.gpus_per_node)


def _fastest(fn, c: M.Cluster) -> str | None:
    """Which coordinate changes from rank 0 to rank 1 in `fn`'s layout."""
    if c.world < 2:
        return None
    a, b = fn(0), fn(1)
    changed = [axis for axis, x, y in zip(M.AXES, a, b) if x != y]
    return "/".join(changed) or None


def _tp_detail(fn, c: M.Cluster) -> str:
    coords = {r: tuple(int(v) for v in fn(r)) for r in range(c.world)}
    split = [g for g in M.groups(coords, "tp") if len({M.node_of(r, c) for r in g}) > 1]
    g = split[0]
    nodes = sorted({M.node_of(r, c) for r in g})
    fast = _fastest(fn, c)
    return (f"e.g. the TP group of ranks {g[:8]}{' ...' if len(g) > 8 else ''} is on nodes "
            f"{nodes}" + (f"; from rank 0 to rank 1 your {fast} changes: launchers number a "
                          "node's GPUs consecutively, so the coordinate that changes fastest "
                          "stays inside a node" if fast and fast != "tp" else ""))


def judge(place, clusters) -> tuple[list[str], str]:
    """(problems, summary): the first shape where `place` fails, and what fails there."""
    for c in clusters:
        fn = on(place, c)
        result = M.check_placement(fn, c)
        if not result["ok"]:
            problems = [f"on {describe(c)} (node = rank // {c.gpus_per_node}):",
                        *result["problems"]]
            if "tp" in result.get("yours", {}) and result["yours"]["tp"]:
                problems.append(_tp_detail(fn, c))
            return problems, ""
    return [], (f"a valid placement with every TP group inside a node on all {len(clusters)} "
                "shapes: " + "; ".join(describe(c) for c in clusters))


def reference_place():
    """The course's `place`, from the hidden solution file."""
    spec = importlib.util.spec_from_file_location("solution_place", course.lab(SOLUTION))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.place


def check(place=None, solution: bool = False, seed: int | None = None) -> bool:
    """Run `place(rank, tp, pp, dp, gpus_per_node)` on unseen shapes; show the verdict."""
    ref = solution
    if solution:
        place = reference_place()
    try:
        place(0, 2, 2, 2, 4)
    except NotImplementedError as exc:
        return not_yet(EXERCISE, f"place still raises NotImplementedError ({exc}): write it and "
                       "run its cell, then this check", reference=ref).show()
    except Exception:   # noqa: BLE001 - the student's bug: check_placement names it per shape
        pass
    problems, summary = judge(place, shapes(seed))
    return from_problems(EXERCISE, problems, summary + ".", reference=ref).show()


def seed_case(place) -> tuple[list[dict], str]:
    """Seed 001's 32-GPU job under `place`: the node map and the crossing summary."""
    c = SEED_CASE
    fn = on(place, c)
    return M.node_map(fn, c), M.verdict(M.check_placement(fn, c))
