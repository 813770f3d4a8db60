"""Notebook 09's exercise `09-ring-attention`: the online-softmax merge and the loop round the ring.

The student writes `merge(out, lse, block_out, block_lse)` and `ring_attention(q, k, v, causal)` in
a script that ends with `run(ring_attention)`. The course gives `block(q, k, v, mask)` (one block of
attention with its log-sum-exp) and `exchange(k, v, send_to, recv_from)` (one step round the ring
with batch_isend_irecv, differentiable: its backward sends the gradients the other way), so the student's
forward is the whole of the work and autograd gives its backward.

Each launched rank builds q, k, v of the whole sequence from the check's seed in sizes drawn from it
(`dims`), keeps only its contiguous chunk, runs the student's ring non-causal and causal, each with
`(out * G).sum().backward()`, and reports its output and its q, k, v gradients, how often it
called `exchange`, and the student's `merge` on one pair of blocks drawn from the seed (where the
running max changes for some queries, not for others). The check runs NPROC = 3 ranks: on 2 the
left and right neighbours are the same rank, so a ring turned the wrong way, or an lse left stale
after the second block, would give the right numbers there.

In the kernel, `judge` (`ring_judge`) compares each rank with one-process attention in float64 and
names the usual mistakes.
"""
from __future__ import annotations

import functools
import os
import random
import time
import traceback

from dltutor.context_parallel.ring_judge import block, chunk_of, judge_against  # noqa: F401 (block: given)
from dltutor.core import course
from dltutor.core import dist as _dist
from dltutor.grading import ranks

EXERCISE = "09-ring-attention"
NPROC = 3
SEED_ENV = "DLTUTOR_EXERCISE_SEED"
SOLUTION = "09_long_context/solutions/ring_merge.py"
NOTEBOOK = "09_long_sequences_and_experts.ipynb"
FUNCTION = "ring_attention"
HANDOUT = "MY_RING"              # the notebook's variable naming the student's script
CASES = (False, True)            # causal: each check runs both
_EXCHANGED: list = []            # the (k, v) each exchange() returned in this attempt


# ------------------------------------------------------------------ what the course gives
# block(q, k, v, mask) -> (out, lse): one block of attention (ring_judge.block, imported above)


@functools.lru_cache(maxsize=None)
def _exchange_class():
    import torch
    import torch.distributed as dist

    def swap(tensors, send_to: int, recv_from: int):
        sent = [t.contiguous() for t in tensors]
        got = [torch.empty_like(t) for t in sent]
        ops = [dist.P2POp(dist.isend, t, send_to) for t in sent]
        ops += [dist.P2POp(dist.irecv, t, recv_from) for t in got]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return got

    class Exchange(torch.autograd.Function):
        @staticmethod
        def forward(ctx, k, v, send_to, recv_from):
            ctx.peers = (send_to, recv_from)
            return tuple(swap((k, v), send_to, recv_from))

        @staticmethod
        def backward(ctx, grad_k, grad_v):       # the gradients go back the way the data came
            send_to, recv_from = ctx.peers
            return (*swap((grad_k, grad_v), recv_from, send_to), None, None)
    return Exchange


def exchange(k, v, send_to: int, recv_from: int):
    """Send `k` and `v` to rank `send_to`; return the (k, v) that rank `recv_from` sent (every rank
    calls it at the same step). Differentiable: the gradients go back round the ring the other way.
    K and V travel together, so each rank's backward makes its exchanges in the same order."""
    got = _exchange_class().apply(k, v, int(send_to), int(recv_from))
    _EXCHANGED.append(got)
    return got


def _keep_alive():
    """0 x every exchanged tensor, added to the loss: autograd then runs the backward of every
    exchange on every rank, even of a chunk the causal mask skipped, so the ranks' backward sends
    pair up (a node whose output the loss ignores would be left out on one rank only)."""
    return sum((t * 0).sum() for pair in _EXCHANGED for t in pair)


# ------------------------------------------------------------------ the tensors, in both places
def dims(seed: int, world: int = NPROC) -> dict:
    """batch, heads, chunk (rows per rank), head_dim of the check with `seed`: chunk and head_dim
    differ, so a transposed product fails; seq = chunk * world."""
    rng = random.Random(seed)
    chunk = rng.choice((2, 3, 4, 5))
    head_dim = rng.choice([d for d in (3, 4, 6, 7) if d != chunk])
    return {"batch": rng.choice((1, 2)), "heads": rng.choice((1, 2, 3)), "chunk": chunk,
            "head_dim": head_dim, "seq": chunk * world}


def build(seed: int, world: int = NPROC) -> dict:
    """q, k, v and the upstream gradient G of the whole sequence (float64), and the merge test's
    two blocks, from `seed`."""
    import torch
    d = dims(seed, world)
    g = torch.Generator().manual_seed(seed)
    shape = (d["batch"], d["heads"], d["seq"], d["head_dim"])

    def r(*s, scale=1.0):
        return torch.randn(*s, generator=g, dtype=torch.float64) * scale
    small = (d["batch"], d["heads"], d["chunk"])
    lse = r(*small)
    return {"q": r(*shape, scale=1.5), "k": r(*shape, scale=1.5), "v": r(*shape),
            "G": r(*shape), "merge": {"out": r(*small, d["head_dim"]), "lse": lse,
                                      "block_out": r(*small, d["head_dim"]),
                                      "block_lse": lse + r(*small, scale=2.0)}}


# ------------------------------------------------------------------ inside the launched ranks
def error_record(exc: BaseException, fn, **extra) -> dict:
    """What a rank reports when the student's code raised: the error, the student's line, when."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    mine = [f for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == fn.__code__.co_filename]
    if mine:
        text += f" (at your line {mine[-1].lineno}: {mine[-1].line})"
    return {"event": "error", "error": text, "t": time.time(), **extra}


def _merge_test(merge, full: dict) -> dict:
    m = full["merge"]
    out, lse = merge(m["out"].clone(), m["lse"].clone(), m["block_out"].clone(),
                     m["block_lse"].clone())
    return {"out": out.detach().tolist(), "lse": lse.detach().tolist()}


def _one_case(fn, full: dict, rank: int, world: int, causal: bool) -> dict:
    mine = {n: chunk_of(full[n], rank, world).clone().requires_grad_() for n in "qkv"}
    _EXCHANGED.clear()
    out = fn(mine["q"], mine["k"], mine["v"], causal)
    if not hasattr(out, "shape") or tuple(out.shape) != tuple(mine["q"].shape):
        raise TypeError(f"ring_attention must return this rank's output, shaped like q "
                        f"{tuple(mine['q'].shape)}, not {getattr(out, 'shape', type(out).__name__)}")
    forward_exchanges = len(_EXCHANGED)
    ((out * chunk_of(full["G"], rank, world)).sum() + _keep_alive()).backward()
    _EXCHANGED.clear()
    return {"causal": causal, "out": out.detach().tolist(), "exchanges": forward_exchanges,
            "grads": {n: None if t.grad is None else t.grad.tolist() for n, t in mine.items()}}


def attempt(ring_attention, rank: int, world: int, seed: int) -> tuple[dict, BaseException | None]:
    """Run the student's merge on the test blocks, then the ring non-causal and causal, forward and
    backward: (the record to report, the exception the student's code raised or None)."""
    full = build(seed, world)
    phase = "merge"
    try:
        merge = ring_attention.__globals__.get("merge")
        merged = _merge_test(merge, full) if callable(merge) else None
        cases = []
        for causal in CASES:
            phase = "causal" if causal else "non-causal"
            cases.append(_one_case(ring_attention, full, rank, world, causal))
    except Exception as exc:  # noqa: BLE001 - the student's code: report it, the caller raises
        return error_record(exc, ring_attention, phase=phase), exc
    return {"event": "ring", "merge": merged, "cases": cases}, None


def run(ring_attention) -> None:
    """The last line of the student's script: run `ring_attention` on this rank, report it."""
    with _dist.session(use_cuda=False) as ctx:
        record, exc = attempt(ring_attention, ctx.rank, ctx.world_size,
                              int(os.environ.get(SEED_ENV, "0")))
        _dist.report(**record)
        if exc is not None:
            raise exc


# ------------------------------------------------------------------ in the kernel
def judge(metrics: list[dict], seed: int, world: int = NPROC) -> tuple[list[str], str]:
    """(problems, summary): the ranks' reports against one-process attention (`ring_judge`)."""
    return judge_against(metrics, build(seed, world), dims(seed, world), world)


def work_file():
    """Where the notebook writes the student's script (`%%writefile {MY_RING}`)."""
    return ranks.work_file("ring_attention.py")


def handout(variable: str = HANDOUT) -> str | None:
    """The script as handed out: notebook 09's `%%writefile {variable}` cell (None if absent)."""
    return ranks.handout(NOTEBOOK, variable)


def check(script=None, solution: bool = False, echo: bool = True, timeout: float = 120.0,
          seed: int | None = None) -> bool:
    """Launch `script` on NPROC gloo ranks with a fresh seed and show the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    handed = handout(HANDOUT)
    quiet = handed is not None and ranks.untouched(script, handed)   # the TODOs: no tracebacks
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC, todo="merge and ring_attention",
                              seed_env=SEED_ENV, reference=solution, timeout=timeout, seed=seed,
                              echo=echo and not quiet, handout=handed)
