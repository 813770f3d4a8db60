"""Lab 02 past one node: where a job's ranks ran, and whether it gave the one-node answer.

    nodes = job_nodes(2)            # 2 when the cluster has two nodes in service (sinfo), else 1
    job = slurm.run_batch(LAB, nodes=nodes, tasks_per_node=2 // nodes, ...)
    print(ran_on(job.metrics))      # ran on 2 node(s): node1 [0], node2 [1] (2 node(s) x 1 rank(s))
    agreement(job.metrics, one_node.metrics)   # the same global work on one node: same numbers?

Every lab-02 rank reports its host (`dltutor.core.dist.report` adds "host"), so the hosts come from
the job's own output, never from what was asked of Slurm. The same ranks with the same global batch
compute the same thing on one node or on two: the data shards follow the rank, not the host, and the
all-reduce sums in an order set by the ranks. `agreement` measures how close the two runs are.
"""
from __future__ import annotations

from dltutor.core.hosts import hosts_line, shape_label

RTOL = 1e-5   # relative: far above float32 rounding of one step (~1e-7), far below any real change


def hosts(metrics: list[dict]) -> list[str]:
    """Every rank's host name, in rank order, from the ranks' DLTUTOR_METRICS records."""
    by_rank = {m["rank"]: m.get("host") for m in metrics}
    missing = [r for r, h in by_rank.items() if not h]
    if not metrics or missing:
        raise ValueError(f"no host in the metrics of rank(s) {missing or 'any'}: "
                         "run a lab whose report carries 'host' (dltutor.core.dist.report)")
    return [by_rank[r] for r in sorted(by_rank)]


def ran_on(metrics: list[dict]) -> str:
    """`ran on 2 node(s): node1 [0], node2 [1] (2 node(s) x 1 rank(s))`, from the ranks' own reports."""
    where = hosts(metrics)
    return f"ran on {len(set(where))} node(s): " + hosts_line(where).removeprefix("ranks on hosts: ")


def shape(metrics: list[dict]) -> str:
    """`2 node(s) x 1 rank(s)`: the label a throughput of this run carries."""
    return shape_label(hosts(metrics))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def agreement(run: list[dict], reference: list[dict], rtol: float = RTOL) -> dict:
    """One row: `run` (e.g. 2 nodes) against `reference` (1 node, same ranks, same global batch).

    Largest relative difference of the loss curve (over steps), the final loss and the parameter
    checksum (sum of |w|, every rank), and `agrees`: all within `rtol`; plus each run's shape and
    global img/s (a speed, not compared: the nodes share this machine's cores)."""
    a, b = run[0], reference[0]
    if a["global_batch"] != b["global_batch"] or a["world_size"] != b["world_size"]:
        raise ValueError(f"not the same global work: {a['world_size']} ranks x batch "
                         f"{a['global_batch']} against {b['world_size']} x {b['global_batch']}")
    if len(a["loss_curve"]) != len(b["loss_curve"]):
        raise ValueError(f"not the same number of steps: {len(a['loss_curve'])} against "
                         f"{len(b['loss_curve'])}")
    curve = max(_rel(x, y) for x, y in zip(a["loss_curve"], b["loss_curve"]))
    final = _rel(a["final_loss"], b["final_loss"])
    checksum = max(_rel(m["param_checksum"], b["param_checksum"]) for m in run + reference)
    return {"run": shape(run), "reference": shape(reference), "world_size": a["world_size"],
            "global_batch": a["global_batch"], "steps": len(a["loss_curve"]),
            "final_loss": a["final_loss"], "reference_final_loss": b["final_loss"],
            "curve_rel_diff": curve, "final_rel_diff": final, "checksum_rel_diff": checksum,
            "rtol": rtol, "agrees": max(curve, final, checksum) <= rtol,
            "global_img_per_s": a.get("global_img_per_s"),
            "reference_img_per_s": b.get("global_img_per_s")}


def agreement_line(row: dict) -> str:
    """The sentence a comparison row says, from its numbers."""
    verdict = "the same answer" if row["agrees"] else "NOT the same answer"
    return (f"{row['run']} vs {row['reference']} ({row['world_size']} ranks, global batch "
            f"{row['global_batch']}, {row['steps']} steps): {verdict} within rtol {row['rtol']:g} "
            f"(final loss {row['final_loss']:.6f} vs {row['reference_final_loss']:.6f}; largest "
            f"relative difference: loss curve {row['curve_rel_diff']:.1e}, parameter checksum "
            f"{row['checksum_rel_diff']:.1e})")


def job_nodes(want: int = 2) -> int:
    """Nodes a job can have now: `want`, or fewer when the cluster has fewer in service (sinfo),
    at least 1; `want` where there is no Slurm to ask (the job script is only shown)."""
    import shutil

    from dltutor.launch.nodes import nodes_in_service
    if shutil.which("sinfo") is None:
        return int(want)
    return max(1, min(int(want), nodes_in_service()))
