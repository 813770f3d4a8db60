"""The kernel's side of the `09-moe-dispatch` check (see `exercise_dispatch` for what the ranks
report): each rank's output against the one-process MoE, and its all_to_all_single calls against
the routing's plan, with the usual mistakes named.

`judge_against(metrics, data, world)` returns (problems, summary). A wrong output is matched
against the expert-parallel layer run again in one process with each known mistake (`MISTAKES`):
gate weights not applied or applied twice, results not put back in the tokens' order, tokens sent
without grouping them by destination rank. A failed exchange is named from the recorded calls:
counts never exchanged (the receive sizes assumed), input/output split sizes swapped in the
dispatch or in the combine, rows sent to a rank that does not own their expert. `apply_expert`
(the check's experts) lives here, used by both sides.
"""
from __future__ import annotations

from dltutor.grading import ranks
from dltutor.launch.results import lost_peer

TOL = 1e-9
MISTAKES = {   # name: (grouped, unpermuted, weight power), and what it means
    "no_weights": ((True, True, 0), "the gate weights are not applied: multiply each choice's "
                   "expert output by its weight, then sum the k choices"),
    "weights_twice": ((True, True, 2), "the gate weights are applied twice (each choice's output "
                      "is multiplied by its weight once)"),
    "not_unpermuted": ((True, False, 1), "the tokens come back in the wrong order: the combine "
                       "returns the rows in the order they were sent (grouped by expert); put "
                       "them back where they came from (out[order] = back) before weighting"),
    "not_grouped": ((False, True, 1), "the tokens were not grouped by destination rank: the "
                    "split sizes count rows per rank, so the rows sent must be in that order "
                    "(rows[order])"),
}


def apply_expert(data: dict, e: int, rows):
    """Expert e of the check: tanh(rows W_eᵀ + b_e)."""
    import torch
    return torch.tanh(rows @ data["W"][e].T + data["b"][e])


def plan(data: dict, world: int) -> dict:
    """Each rank's sort order and counts: `sent[r][b]` rows from rank r to rank b."""
    import torch
    per, out = data["num_experts"] // world, {"order": [], "counts": [], "sent": []}
    for r in range(world):
        flat = data["experts"][r].reshape(-1)
        counts = torch.bincount(flat, minlength=data["num_experts"])
        out["order"].append(torch.argsort(flat, stable=True))
        out["counts"].append(counts)
        out["sent"].append([int(counts[b * per:(b + 1) * per].sum()) for b in range(world)])
    return out


def reference(data: dict, world: int) -> list:
    """Each rank's y[t] = sum_j w[t, j] expert_{e[t, j]}(x[t]), one token at a time."""
    import torch
    ys = []
    for r in range(world):
        x, e, w = data["x"][r], data["experts"][r], data["weights"][r]
        ys.append(torch.stack([sum(w[t, j] * apply_expert(data, int(e[t, j]), x[t:t + 1])[0]
                                   for j in range(e.shape[1])) for t in range(x.shape[0])]))
    return ys


def simulate(data: dict, world: int, mistake: str) -> list:
    """Each rank's output of the expert-parallel layer with `mistake`, run in one process."""
    import torch
    grouped, unpermuted, power = MISTAKES[mistake][0]
    p, k, per = plan(data, world), data["top_k"], data["num_experts"] // world
    parts = []                                   # parts[a][b]: rows rank a sends to rank b
    for r in range(world):
        rows = data["x"][r].repeat_interleave(k, dim=0)
        parts.append(list(torch.split(rows[p["order"][r]] if grouped else rows, p["sent"][r])))
    back = [[None] * world for _ in range(world)]     # back[a][b]: results b returns to a
    for b in range(world):
        for a in range(world):
            sizes = p["counts"][a][b * per:(b + 1) * per].tolist()
            back[a][b] = torch.cat([apply_expert(data, b * per + j, rows) for j, rows
                                    in enumerate(torch.split(parts[a][b], sizes))])
    ys = []
    for r in range(world):
        got = torch.cat(back[r])
        flat = torch.empty_like(got)
        if unpermuted:
            flat[p["order"][r]] = got
        else:
            flat = got
        w = data["weights"][r] ** power
        ys.append((flat.view(-1, k, flat.shape[-1]) * w.unsqueeze(-1)).sum(1))
    return ys


def _close(a, b) -> bool:
    return a.shape == b.shape and float((a - b).abs().max()) <= TOL


def _output_problems(got: list, want: list, data: dict, world: int) -> list[str]:
    wrong = [r for r in range(world) if not _close(got[r], want[r])]
    if not wrong:
        return []
    diff = max(float((got[r] - want[r]).abs().max()) if got[r].shape == want[r].shape
               else float("inf") for r in wrong)
    head = (f"rank{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))}: max |difference| "
            f"{diff:.3g} from the one-process MoE")
    for name, (_, why) in MISTAKES.items():
        sim = simulate(data, world, name)
        if all(_close(got[r], sim[r]) for r in wrong):
            return [f"{head}: {why}"]
    if all(got[r].shape == want[r].shape and _close(got[r][got[r][:, 0].argsort()],
                                                    want[r][want[r][:, 0].argsort()])
           for r in wrong):
        return [f"{head}: the right rows in the wrong order: {MISTAKES['not_unpermuted'][1]}"]
    return [f"{head}: not a known slip: check the counts, the split sizes, the order of the rows "
            "sent and of the rows put back, the weights"]


def _exchange_problem(rank: int, calls: list, p: dict, world: int) -> str | None:
    """Which split sizes rank `rank` got wrong, from its recorded all_to_all_single calls."""
    sent = p["sent"][rank]
    received = [p["sent"][a][rank] for a in range(world)]
    rows = [c for c in calls if c["dtype"].startswith("float")]
    if rows and not any(c["dtype"].startswith(("int", "uint")) for c in calls[:calls.index(rows[0])]):
        return ("the counts were never exchanged: a rank cannot know how many rows it will receive "
                f"(rank {rank} receives {received}, not what it sends, {sent}): all_to_all_single "
                "the per-expert counts first, then size the receive buffer and output_split_sizes "
                "from them")
    if rows and rows[0]["in_splits"] == received and rows[0]["out_splits"] == sent != received:
        return ("the dispatch's split sizes are the wrong way round: input_split_sizes is what "
                f"this rank sends to each rank ({sent}), output_split_sizes what it receives "
                f"from each ({received})")
    if len(rows) > 1 and rows[1]["in_splits"] == sent and rows[1]["out_splits"] == received != sent:
        return ("the combine used the dispatch's split sizes: the way back swaps them "
                f"(input_split_sizes = what arrived from each rank, {received}; "
                f"output_split_sizes = what this rank sent, {sent})")
    return None


def _error_problems(errors: list[dict], p: dict, world: int) -> list[str]:
    out, named = [], set()
    for i, e in enumerate(ranks.in_time_order(errors)):
        line = f"rank {e['rank']} failed: {e['error']}"
        why = _exchange_problem(e["rank"], e.get("calls", []), p, world)
        if "lives on rank" in e["error"]:
            why = why or ("rows reached a rank that does not own their expert: group the rows "
                          "by destination rank and read each source's rows per local expert "
                          "from the exchanged counts")
        if why and why not in named:
            line, _ = f"{line} -- {why}", named.add(why)
        if i and lost_peer(e["error"]):
            line += " (a consequence: it waited for the rank above)"
        out.append(line)
    return out


def judge_against(metrics: list[dict], data: dict, world: int) -> tuple[list[str], str]:
    """(problems, summary): every rank's output and exchanges against `data`'s routing."""
    import torch
    p = plan(data, world)
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return _error_problems(errors, p, world), ""
    reports = sorted((m for m in metrics if m.get("event") == "moe"), key=lambda m: m["rank"])
    if [m["rank"] for m in reports] != list(range(world)):
        return [f"rank(s) {[m['rank'] for m in reports]} of {world} reported (once each) through "
                "run(moe): keep the last line of the script"], ""
    got = [torch.tensor(m["out"], dtype=torch.float64).reshape(data["x"][m["rank"]].shape)
           for m in reports]
    want = reference(data, world)
    problems = _output_problems(got, want, data, world)
    err = max(float((g - w).abs().max()) for g, w in zip(got, want) if g.numel())
    silent = data["silent"]
    calls = "/".join(sorted({str(len(m["calls"])) for m in reports}))
    return problems, (f"on {world} ranks ({' and '.join(str(len(x)) for x in data['x'])} tokens, "
                      f"d_model {data['d_model']}, {data['num_experts']} experts, "
                      f"top-{data['top_k']}), every rank's output matches the one-process MoE "
                      f"(max error {err:.1e}) with rows sent {p['sent']} (rank by rank), expert "
                      f"{data['empty']} getting no token and rank {silent} sending nothing to "
                      f"the other rank{'s' if world > 2 else ''}; each rank made {calls} "
                      "all_to_all_single calls")
