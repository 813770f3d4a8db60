"""The activation memory of attention, measured (peak bytes) beside its formula.

    m = memory.measure(lambda: step(q, k, v), q.device)   # {"peak_bytes", "saved_bytes", "how"}
    f = memory.formula(batch, heads, seq, head_dim, world_size, element_size)

What is measured, precisely: the most bytes held at one moment by the tensors torch creates
inside `fn` (forward and backward), the inputs made before it not counted.
  * CPU: `torch.distributed._tools.mem_tracker.MemTracker`, a dispatch mode that sees every
    tensor each op creates and when its storage is freed (the transient score matrix included);
    scratch memory inside one fused kernel is invisible to it (the course's attention has none:
    its score matrix is an op's output).
  * GPU: `torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`, minus what was
    allocated before (the caching allocator's own count, fused-kernel scratch included).
`saved_bytes` (both devices): what autograd keeps for backward, counted by
`torch.autograd.graph.saved_tensors_hooks` (each storage once, the inputs included).

The formula, per rank, for a query block of s_q positions against s_k keys, counted from what
the course's code holds at its peak (in backward):
  score term   b·h·s_q·s_k·bytes  -- one score-sized matrix;
  linear term  b·h·s_q·d·bytes    -- one tensor the size of q.
One process (`attention.reference`, autograd): s_q = s_k = S; peak 3 score terms (the kept
probabilities P, dP and dS) + 4 linear (out, dq, dk, dv); backward keeps P (1 score term).
The ring on P ranks (`ring._Ring.backward`): s_q = s_k = S/P, one block at a time; peak 4 score
terms (scores, P, dO·Vᵀ, dS) + 16 linear (dq, dk, dv; K, V, dK, dV arriving while the last four
are sent: 8; the block's copies of q, dO, K, V: 4; out); backward keeps q, k, v, out and the lse
(4 linear + b·h·s_q·bytes): the score terms are transient and P² times smaller.
The score term dominates once s_k is large against d (one process: 3·S > 4·d).
"""
from __future__ import annotations

import torch

CPU_HOW = ("peak bytes of the tensors created in forward+backward (inputs not counted), "
           "torch.distributed._tools.mem_tracker.MemTracker on the CPU")
GPU_HOW = ("torch.cuda.max_memory_allocated during forward+backward minus the bytes allocated "
           "before (reset_peak_memory_stats)")


def _saved_counter():
    seen: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        seen[st.data_ptr()] = st.nbytes()
        return t
    return seen, pack


def measure(fn, device) -> dict:
    """Run `fn()` (forward and backward) once; its peak bytes and the bytes saved for backward."""
    seen, pack = _saved_counter()
    device = torch.device(device)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            fn()
            torch.cuda.synchronize(device)
            peak, how = torch.cuda.max_memory_allocated(device) - base, GPU_HOW
        else:
            from torch.distributed._tools.mem_tracker import MemTracker
            tracker = MemTracker()
            with tracker:
                fn()
            snap = tracker.get_tracker_snapshot("peak")
            peak = max((v["Total"] for d, v in snap.items() if torch.device(d).type == device.type),
                       default=0)
            how = CPU_HOW
    return {"peak_bytes": int(peak), "saved_bytes": int(sum(seen.values())), "how": how}


def formula(batch: int, heads: int, seq: int, head_dim: int, world_size: int,
            element_size: int, ring: bool | None = None) -> dict:
    """Per-rank bytes of attention's two terms (module docstring), and which one dominates.
    ring False (default for world_size 1): the whole sequence on one process; ring True
    (default for P > 1): the course's ring, one block at a time.
    `total` is the peak the formula predicts, `kept` what backward keeps (both in bytes)."""
    if world_size < 1 or seq % world_size:
        raise ValueError(f"seq {seq} does not split over {world_size} ranks: give a multiple of it")
    s_q = s_k = seq // world_size
    score = batch * heads * s_q * s_k * element_size
    linear = batch * heads * s_q * head_dim * element_size
    ring = world_size > 1 if ring is None else ring
    n_score, n_linear = (4, 16) if ring else (3, 4)
    kept = 4 * linear + batch * heads * s_q * element_size if ring else score + 4 * linear
    return {"score": score, "linear": linear, "total": n_score * score + n_linear * linear,
            "kept": kept, "s_q": s_q, "s_k": s_k,
            "dominant": "score" if n_score * score >= n_linear * linear else "linear"}


def pass_of(attend, q, k, v, weight):
    """fn for `measure`: forward through `attend(q, k, v)` and backward of sum(out * weight)."""
    def fn():
        qs, ks, vs = (t.detach().requires_grad_() for t in (q, k, v))
        out = attend(qs, ks, vs)
        (out * weight).sum().backward()
    return fn


def row(name: str, world_size: int, seq: int, measured: dict, f: dict) -> dict:
    """One table row: measured peak (and saved) beside the formula's total and terms."""
    return {"impl": name, "ranks": world_size, "seq": seq, "peak_bytes": measured["peak_bytes"],
            "saved_bytes": measured["saved_bytes"], "formula_bytes": f["total"],
            "kept_formula_bytes": f["kept"],
            "score_bytes": f["score"], "linear_bytes": f["linear"], "dominant": f["dominant"],
            "ratio": measured["peak_bytes"] / f["total"] if f["total"] else float("nan"),
            "how": measured["how"]}
