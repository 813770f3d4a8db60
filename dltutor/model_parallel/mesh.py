"""3D parallelism: which rank is which (tp, pp, dp), where the node boundaries fall, and how many
bytes each form moves.

torch names a rank's place with a DeviceMesh: `init_device_mesh("cuda", (dp, pp, tp),
mesh_dim_names=("dp", "pp", "tp"))` lays the ranks out row-major, so the LAST dimension varies
fastest: rank = (dp_idx * pp + pp_idx) * tp + tp_idx. Launchers number the GPUs of a node
consecutively, so the fastest dimension (tp here) lands inside a node. `reference_coords` is that
rule; `check_placement` checks any rank -> (tp, pp, dp) function against the rules a placement
must keep (seed 001: "Keep as many TP partitions as possible within a node").
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

AXES = ("tp", "pp", "dp")


@dataclass(frozen=True)
class Cluster:
    nodes: int = 4
    gpus_per_node: int = 8
    tp: int = 4
    pp: int = 4
    dp: int = 2

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    def check(self) -> None:
        if self.tp * self.pp * self.dp != self.world:
            raise ValueError(f"tp*pp*dp = {self.tp * self.pp * self.dp} but the cluster has "
                             f"{self.world} GPUs ({self.nodes} nodes x {self.gpus_per_node})")


def reference_coords(rank: int, c: Cluster) -> tuple[int, int, int]:
    """(tp, pp, dp) of `rank` in init_device_mesh(..., (dp, pp, tp)) order: tp fastest."""
    mesh = np.arange(c.world).reshape(c.dp, c.pp, c.tp)
    d, p, t = (int(i[0]) for i in np.nonzero(mesh == rank))
    return t, p, d


def node_of(rank: int, c: Cluster) -> int:
    return rank // c.gpus_per_node


def groups(coords: dict, axis: str) -> list[list[int]]:
    """The process groups along `axis`: ranks whose other two coordinates agree."""
    k = AXES.index(axis)
    out = {}
    for rank, xyz in sorted(coords.items()):
        out.setdefault(tuple(v for i, v in enumerate(xyz) if i != k), []).append(rank)
    return list(out.values())


def crossing(coords: dict, axis: str, c: Cluster) -> int:
    """How many `axis` groups span more than one node."""
    return sum(len({node_of(r, c) for r in g}) > 1 for g in groups(coords, axis))


def pp_hops_across_nodes(coords: dict, c: Cluster) -> list[tuple[int, int]]:
    """Stage boundaries (s, s+1) whose send crosses a node, stages counted from 0 as everywhere
    in the course (tables, `node_map`'s p0..p3). Seed 001 counts from 1: its "between pipeline
    stages 2 and 3" is (1, 2) here."""
    where = {xyz: r for r, xyz in coords.items()}
    hops = set()
    for (t, p, d), r in where.items():
        if p + 1 < c.pp and node_of(r, c) != node_of(where[(t, p + 1, d)], c):
            hops.add((p, p + 1))
    return sorted(hops)


def check_placement(fn, c: Cluster = Cluster()) -> dict:
    """Run the student's `fn(rank) -> (tp, pp, dp)` on every rank and check it: a one-to-one map
    onto the tp x pp x dp grid, and no TP group split across nodes. Returns ok, problems, and
    what crosses nodes (beside the reference placement's)."""
    c.check()
    problems = []
    try:
        coords = {r: tuple(int(v) for v in fn(r)) for r in range(c.world)}
    except Exception as exc:  # the student's code: report, do not crash the check
        return {"ok": False, "problems": [f"fn raised {type(exc).__name__}: {exc}"]}
    if any(len(v) != 3 for v in coords.values()):
        return {"ok": False, "problems": ["fn must return three numbers (tp, pp, dp)"]}
    grid = set(itertools.product(range(c.tp), range(c.pp), range(c.dp)))
    if set(coords.values()) != grid:
        missing = sorted(grid - set(coords.values()))[:3]
        problems.append(f"not one rank per (tp, pp, dp): e.g. {missing} has no rank or a "
                        f"value is out of range")
        return {"ok": False, "problems": problems}
    ref = {r: reference_coords(r, c) for r in range(c.world)}
    summary = {name: {axis: crossing(cs, axis, c) for axis in AXES} | {
        "pp_hops_across_nodes": pp_hops_across_nodes(cs, c)} for name, cs in
        (("yours", coords), ("reference", ref))}
    if summary["yours"]["tp"]:
        problems.append(f"{summary['yours']['tp']} TP group(s) span two nodes: TP all-reduces "
                        "every layer, so it must stay on the node's fast links")
    return {"ok": not problems, "problems": problems, **summary}


def node_map(fn, c: Cluster = Cluster()) -> list[dict]:
    """One row per node: the (tp, pp, dp) of each of its GPUs under placement `fn`."""
    return [{"node": n, **{f"gpu{g}": "t{}p{}d{}".format(*fn(n * c.gpus_per_node + g))
                           for g in range(c.gpus_per_node)}} for n in range(c.nodes)]


def verdict(result: dict) -> str:
    """The self-check's answer in words."""
    if not result["ok"]:
        return "NOT YET: " + "; ".join(result["problems"])
    y, r = result["yours"], result["reference"]
    return ("PASS: every TP group is inside one node. Groups crossing nodes (yours / reference): "
            + ", ".join(f"{a.upper()} {y[a]}/{r[a]}" for a in AXES)
            + f"; pipeline sends crossing nodes (stages counted from 0): {_hops(y)} "
              f"(reference: {_hops(r)})")


def _hops(summary: dict) -> str:
    hops = summary["pp_hops_across_nodes"]
    return ", ".join(f"between stages {a} and {b}" for a, b in hops) if hops else "none"


# ---------------------------------------------------------------- bytes per form
def step_bytes(hidden: int, layers: int, seq: int, micro_batch: int, microbatches: int,
               params: float, c: Cluster, element_size: int = 2) -> dict:
    """Bytes ONE GPU sends per training step for each form (ring all-reduce: 2(n-1)/n x D).

    TP: 4 all-reduces of (micro_batch x seq x hidden) per layer and micro-batch (2 forward,
        2 backward: attention and MLP), on the layers/pp layers this GPU holds;
    PP: one activation forward and one gradient back per micro-batch and stage boundary;
    DP: one all-reduce of this GPU's share of the gradients, params / (tp x pp).
    """
    act = micro_batch * seq * hidden * element_size
    ring = lambda n, d: 2 * (n - 1) / n * d if n > 1 else 0.0  # noqa: E731
    return {"tp": 4 * (layers / c.pp) * microbatches * ring(c.tp, act),
            "pp": 2 * microbatches * act if c.pp > 1 else 0.0,
            "dp": ring(c.dp, params * element_size / (c.tp * c.pp)),
            "tp_calls": 4 * (layers // c.pp) * microbatches, "pp_calls": 2 * microbatches,
            "dp_calls": 1}


def form_times(hidden: int, layers: int, seq: int, micro_batch: int, microbatches: int,
               params: float, c: Cluster, intra: tuple, inter: tuple, element_size: int = 2) -> list:
    """Per form: calls and bytes per GPU per step, and the alpha-beta time of those calls on the
    node's links (`intra` = (alpha s, beta s/B)) and across nodes (`inter`): notebook 05's ring
    model for the all-reduces, alpha + D*beta for a pipeline send."""
    from dltutor.allreduce.cost import model_time
    act = micro_batch * seq * hidden * element_size
    sent = step_bytes(hidden, layers, seq, micro_batch, microbatches, params, c, element_size)
    grads = params * element_size / (c.tp * c.pp)
    per_call = {"tp": (c.tp, act), "pp": (2, act), "dp": (c.dp, grads)}
    rows = []
    for form, (n, d) in per_call.items():
        calls = sent[f"{form}_calls"]
        algorithm = "pingpong" if form == "pp" else "ring"   # a send is one message of d bytes
        one = (lambda a, b: model_time(algorithm, n, d, a, b))  # noqa: E731 (0 when n == 1)
        rows.append({"form": form.upper(), "group size": n, "calls/step": calls,
                     "bytes per call": d, "bytes/GPU/step": sent[form],
                     "s/step on node links": calls * one(*intra),
                     "s/step across nodes": calls * one(*inter)})
    return rows
