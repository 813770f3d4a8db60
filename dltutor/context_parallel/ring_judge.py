"""The kernel's side of the `09-ring-attention` check (see `exercise_ring` for what the ranks report):
each rank's output and q, k, v gradients against one-process attention, and the student's merge
against the online-softmax rule, with the usual mistakes named.

`judge_against(metrics, full, dims, world)` returns (problems, summary). A wrong output is matched
against the ring run again in one process with each known mistake (`MISTAKES`): the running output
not rescaled when the max changes, lse not updated, the causal mask dropped, the diagonal chunk kept
whole or skipped, the triangular mask on every earlier chunk too, K/V sent one way round the ring
while the owner is counted the other, K/V never rotated (the exchange's result not used). A merge
that returns the old lse, the max instead of the log-sum-exp, or an output not rescaled is named
from the merge test alone; ranks that failed are named cause first. `block` (one block of
attention with its lse) and `chunk_of` (a rank's rows) live here, used by both sides: the student
gets `block` through `exercise_ring`.
"""
from __future__ import annotations

from dltutor.grading import ranks
from dltutor.launch.results import lost_peer

TOL = 1e-9
MISTAKES = {   # name: (merge, mask rule, ring direction), and what it means
    "no_rescale": (("no_rescale", "right", "right"),
                   "the running output is not rescaled when the max changes: out must be "
                   "multiplied by exp(lse - new_lse) before the new block is added"),
    "stale_lse": (("stale_lse", "right", "right"),
                  "lse is not updated after a merge: return the new log-sum-exp (logaddexp of "
                  "the two), or later blocks are weighed against the first block only"),
    "no_mask": (("right", "none", "right"),
                "the causal mask is dropped: queries attend to keys after them"),
    "diag_whole": (("right", "diag_whole", "right"),
                   "the causal mask is applied to whole blocks: the diagonal chunk (the rank's own "
                   "K/V) is kept whole, so each query sees the keys after it in its own chunk: "
                   "mask it with the lower triangle"),
    "diag_skipped": (("right", "diag_skipped", "right"),
                     "the causal mask is applied to whole blocks: the diagonal chunk (the rank's "
                     "own K/V) is skipped, so no query sees itself or the keys before it in its "
                     "chunk: mask it with the lower triangle, do not drop it"),
    "tril_everywhere": (("right", "tril_everywhere", "right"),
                        "the lower-triangle mask is applied to earlier chunks too: a chunk before "
                        "the rank's own is seen whole, only the diagonal chunk is masked"),
    "wrong_way": (("right", "right", "reversed"),
                  "K/V are sent one way round the ring while the chunk's owner is counted the "
                  "other way: when K/V come from rank - 1, at step s you hold rank - s's chunk; "
                  "when they come from rank + 1, rank + s's"),
    "not_rotated": (("right", "right", "none"),
                    "K/V are never rotated: every step attends to the rank's own chunk again "
                    "(use what exchange() returns as the next k and v)"),
}


def block(q, k, v, mask=None):
    """(out, lse) of one block: softmax(q kᵀ/√d) v over these keys, and each query's log-sum-exp
    of its scores, [b, h, s]. `mask` [q_len, k_len] bool: True where a query may attend; a query
    with no key allowed gets out 0 and lse -inf (merged in, it changes nothing)."""
    import torch
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    return torch.exp(scores - safe.unsqueeze(-1)) @ v, lse


def chunk_of(x, rank: int, world: int):
    n = x.shape[2] // world
    return x[:, :, rank * n:(rank + 1) * n]


def reference(q, k, v, causal: bool):
    """One-process softmax(q kᵀ/√d) v, written out (float64)."""
    import torch
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if causal:
        n = q.shape[-2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def right_merge(out, lse, block_out, block_lse):
    import torch
    new = torch.logaddexp(lse, block_lse)
    return (torch.exp(lse - new).unsqueeze(-1) * out
            + torch.exp(block_lse - new).unsqueeze(-1) * block_out), new


def _merge(kind: str, out, lse, bout, blse):
    import torch
    if out is None:
        return bout, blse
    new = torch.logaddexp(lse, blse)
    if kind == "no_rescale":
        return out + torch.exp(blse - new).unsqueeze(-1) * bout, new
    merged, new = right_merge(out, lse, bout, blse)
    return (merged, lse) if kind == "stale_lse" else (merged, new)


def _mask(rule: str, owner: int, rank: int, chunk: int, causal: bool):
    """"skip", None (the whole block) or the bool mask of the block of `owner`'s K/V on `rank`."""
    import torch
    tril = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    if not causal or rule == "none" or owner < rank and rule != "tril_everywhere":
        return None
    if owner > rank or owner == rank and rule == "diag_skipped":
        return "skip"
    return None if rule == "diag_whole" and owner == rank else tril


def simulate(full: dict, world: int, causal: bool, mistake: str) -> list:
    """Each rank's output of the ring with `mistake` (a key of MISTAKES, or "right"), in one
    process: None where that rank merged no block."""
    merge, rule, way = MISTAKES[mistake][0] if mistake != "right" else ("right",) * 3
    outs = []
    for rank in range(world):
        q = chunk_of(full["q"], rank, world)
        out = lse = None
        for step in range(world):
            owner = (rank - step) % world                    # whose chunk the student thinks
            data = {"right": owner, "reversed": (rank + step) % world, "none": rank}[way]
            mask = _mask(rule, owner, rank, q.shape[2], causal)
            if isinstance(mask, str):
                continue
            bo, bl = block(q, chunk_of(full["k"], data, world), chunk_of(full["v"], data, world),
                           mask)
            out, lse = _merge(merge, out, lse, bo, bl)
        outs.append(out)
    return outs


def _close(a, b) -> bool:
    return b is not None and a.shape == b.shape and float((a - b).abs().max()) <= TOL


def merge_problem(got: dict | None, full: dict) -> str | None:
    """What is wrong with the student's merge on the test blocks, or None."""
    import torch
    if got is None:
        return "the script defines no function merge(out, lse, block_out, block_lse)"
    m = full["merge"]
    out, lse = torch.tensor(got["out"], dtype=torch.float64), torch.tensor(got["lse"],
                                                                          dtype=torch.float64)
    want_out, want_lse = right_merge(m["out"], m["lse"], m["block_out"], m["block_lse"])
    if _close(out, want_out) and _close(lse, want_lse):
        return None
    head = "merge, on two blocks where the running max changes for some queries"
    if not _close(lse, want_lse):
        if _close(lse, m["lse"]):
            return f"{head}: it returns the old lse: {MISTAKES['stale_lse'][1]}"
        if _close(lse, torch.maximum(m["lse"], m["block_lse"])):
            return (f"{head}: it returns the max of the two lse, not their log-sum-exp "
                    "(torch.logaddexp): the new block's weight is lost")
    if _close(out, _merge("no_rescale", m["out"], m["lse"], m["block_out"], m["block_lse"])[0]):
        return f"{head}: {MISTAKES['no_rescale'][1]}"
    diff_out = float((out - want_out).abs().max()) if out.shape == want_out.shape else float("inf")
    diff_lse = float((lse - want_lse).abs().max()) if lse.shape == want_lse.shape else float("inf")
    return (f"{head}: max |difference| {diff_out:.3g} in out, {diff_lse:.3g} in lse from the "
            "online-softmax rule (new lse = logaddexp(lse, block_lse); out weighted by "
            "exp(lse - new lse), block_out by exp(block_lse - new lse))")


def _case_problems(kind: str, got: list, want: list, exchanges: list, full: dict, world: int,
                   causal: bool, merge_wrong: bool) -> list[str]:
    """What is wrong with the ranks' outputs of one case (each rank's `got` against `want`):
    the known mistake that gives every wrong rank's output, else each rank's difference."""
    wrong = [r for r in range(world) if not _close(got[r], want[r])]
    if not wrong:
        return []
    diff = max(float((got[r] - want[r]).abs().max()) if got[r].shape == want[r].shape
               else float("inf") for r in wrong)
    head = (f"{kind}, rank{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))}: max "
            f"|difference| {diff:.3g} from one-process attention")
    if not any(exchanges):
        return [f"{head}: exchange() was never called, so K/V never went round the ring: each "
                "step pass them on: k, v = exchange(k, v, send_to=, recv_from=)"]
    for name, (_, why) in MISTAKES.items():
        sim = simulate(full, world, causal, name)
        if all(_close(got[r], sim[r]) for r in wrong):
            return [f"{head}: {why}"]
    if merge_wrong:
        return [f"{head}: a consequence of the merge above"]
    return [f"{head}: not a known slip: check the owner of each chunk, the mask, the merge"]


def _grad_problems(rank: int, grads: dict, want: dict, world: int, kind: str) -> list[str]:
    import torch
    out = []
    for n in "qkv":
        if grads.get(n) is None:
            out.append(f"{kind}, rank {rank}: {n} got no gradient: compute with the tensors you "
                       "were given (they require grad) and differentiable torch ops")
            continue
        got, ref = torch.tensor(grads[n], dtype=torch.float64), chunk_of(want[n], rank, world)
        if not _close(got, ref):
            hint = ("; K/V must travel by exchange() (differentiable: its backward sends the "
                    "gradient of each chunk home), not a plain send/recv" if n != "q" else
                    "; write the merge with differentiable torch ops (no .item(), .detach() or "
                    "in-place writes into tensors autograd needs)")
            out.append(f"{kind}, rank {rank}: the gradient of {n} differs from one-process "
                       f"attention's by up to {float((got - ref).abs().max()):.3g}{hint}")
    return out


def _error_problems(errors: list[dict]) -> list[str]:
    out = []
    for i, e in enumerate(ranks.in_time_order(errors)):
        line = f"rank {e['rank']} failed in the {e.get('phase') or 'setup'} run: {e['error']}"
        if "NoneType" in e["error"]:
            line += (" -- a rank merged no block: with the causal mask, the diagonal chunk (the "
                     "rank's own) is masked with the lower triangle, never skipped")
        if i and lost_peer(e["error"]):
            line += " (a consequence: it waited for the rank above)"
        out.append(line)
    return out


def _reference_grads(full: dict, causal: bool) -> tuple:
    leaves = {n: full[n].clone().requires_grad_() for n in "qkv"}
    want = reference(leaves["q"], leaves["k"], leaves["v"], causal)
    (want * full["G"]).sum().backward()
    return want.detach(), {n: t.grad for n, t in leaves.items()}


def judge_against(metrics: list[dict], full: dict, dims: dict, world: int) -> tuple[list, str]:
    """(problems, summary): every rank's merge, outputs and gradients against `full`'s."""
    import torch
    errors = [m for m in metrics if m.get("event") == "error"]
    reports = sorted((m for m in metrics if m.get("event") == "ring"), key=lambda m: m["rank"])
    merged = merge_problem(reports[0]["merge"], full) if reports else None
    if errors:
        return ([merged] if merged else []) + _error_problems(errors), ""
    if [m["rank"] for m in reports] != list(range(world)):
        return [f"rank(s) {[m['rank'] for m in reports]} of {world} reported (once each) through "
                "run(ring_attention): keep the last line of the script"], ""
    problems, worst = ([merged] if merged else []), [0.0, 0.0]
    for c, causal in enumerate((False, True)):
        want, grads = _reference_grads(full, causal)
        kind = "causal" if causal else "non-causal"
        got = [torch.tensor(m["cases"][c]["out"], dtype=torch.float64) for m in reports]
        wants = [chunk_of(want, r, world) for r in range(world)]
        wrong = _case_problems(kind, got, wants, [m["cases"][c]["exchanges"] for m in reports],
                               full, world, causal, merged is not None)
        problems += wrong
        if wrong:             # the gradients of a wrong output say nothing more
            continue
        for m in reports:
            r, case_grads = m["rank"], m["cases"][c]["grads"]
            problems += _grad_problems(r, case_grads, grads, world, kind)
            worst[0] = max(worst[0], float((got[r] - wants[r]).abs().max()))
            worst[1] = max([worst[1]] + [float((torch.tensor(case_grads[n], dtype=torch.float64)
                                                - chunk_of(grads[n], r, world)).abs().max())
                                         for n in "qkv" if case_grads[n] is not None])
    calls = sorted({m["cases"][1]["exchanges"] for m in reports})
    return problems, (f"on {world} ranks (batch {dims['batch']}, heads {dims['heads']}, sequence "
                      f"{dims['seq']} in chunks of {dims['chunk']}, head_dim {dims['head_dim']}), "
                      f"the merge follows the online-softmax rule, and the non-causal and causal "
                      f"outputs match one-process attention (max error {worst[0]:.1e}), as do the "
                      f"q, k, v gradients taken through your forward (max error {worst[1]:.1e}); "
                      f"each rank called exchange() {'/'.join(map(str, calls))} times per pass")
