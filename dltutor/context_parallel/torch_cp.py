"""What torch's own context parallelism does: `torch.distributed.tensor.experimental.context_parallel`.

    r = torch_cp.run(q, k, v, causal=False)   # every rank holds the same whole q, k, v
    r -> {"status": "ran", "out_err": ..., "grad_err": ..., "collectives": {"all_gather_into_tensor": 2},
          "ring": False, ...}   or   {"status": "failed", "error": "NotImplementedError: ..."}

torch shards q, k, v along the sequence on a 1-D device mesh (load-balanced, head-and-tail, by
default), runs `F.scaled_dot_product_attention` on the shards and `context_parallel_unshard`
gathers the output back. Everything here is measured in the run: the largest difference from the
same attention on one process (output and the gradient of q), and the collectives torch's
`CommDebugMode` counted. On GPUs with NCCL it rotates K/V round a ring for both masks. On the CPU
(gloo, torch 2.14) the non-causal forward is right but DTensor decomposes the op into
all-gathers (no ring; at 8 heads and S=1024 it even hands back a head split), its backward raises, and the causal case raises NotImplementedError (no sharding strategy for the CPU flash
op): upstream, pytorch issue 147793 (`UPSTREAM`). The error's first line is returned, not hidden.
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

UPSTREAM = "https://github.com/pytorch/pytorch/issues/147793"
RING_OPS = ("send", "recv", "isend", "irecv", "batch_isend_irecv", "all_to_all", "alltoall",
            "all_to_all_single", "_permute_tensor", "permute")


def _mesh(device: torch.device):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device.type, (dist.get_world_size(),))


def _counts(comm) -> dict:
    """{collective name: times called} from a CommDebugMode, names without the 'c10d_functional.' part."""
    out = {}
    for op, n in comm.get_comm_counts().items():
        name = str(op).split(".")[-1] if "." in str(op) else str(op)
        name = getattr(op, "__name__", name).split(".")[0]
        out[name] = out.get(name, 0) + int(n)
    return out


def first_line(exc: BaseException) -> str:
    """'ErrorType: the first line of its message' (what a student would see on top)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _backward(out, ql, mesh):
    """dq of the same loss on the shards, unsharded; the first line of torch's error if it raises."""
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    try:
        out.float().square().sum().backward()
    except Exception as exc:  # noqa: BLE001 -- shown, not hidden (CPU: no sharding strategy)
        return None, first_line(exc)
    (dq,) = context_parallel_unshard(mesh, [ql.grad], [2])
    return dq, None


def sharded_sdpa(q, k, v, causal: bool, mesh, comm=None):
    """torch's context parallelism on copies of q, k, v (every rank's identical whole tensors):
    (output unsharded, dq unsharded or None, backward's error or None, forward's collectives
    counted by `comm`, a CommDebugMode; None: not counted)."""
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    qs, ks, vs = (t.detach().clone() for t in (q, k, v))  # CP: sharded in place by torch
    pos = torch.arange(q.shape[2], device=q.device, dtype=q.dtype).view(1, 1, -1, 1)  # which positions
    with context_parallel(mesh, buffers=[qs, ks, vs, pos], buffer_seq_dims=[2, 2, 2, 2]):
        ql = qs.detach().requires_grad_()  # the shard, as a leaf (torch restores qs on exit)
        with comm if comm is not None else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(ql, ks, vs, is_causal=causal)
        forward = _counts(comm) if comm is not None else None
        dq, error = _backward(out, ql, mesh)
        out_full, split = _whole_output(out.detach(), q.shape, mesh, pos)
    return out_full, dq, error, {**(forward or {}), "output split": split} if comm is not None else None


def _whole_output(out, shape, mesh, pos):
    """The whole output, and how torch left it split: by sequence (as its inputs), or by heads
    (DTensor picked a head split for the op: seen on the CPU at 8 heads, S=1024). A head split
    holds the sequence in torch's shard order (load-balanced): `pos`, sharded beside q, k, v,
    says which position each row is."""
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard
    world = dist.get_world_size()
    if out.shape[2] * world == shape[2] and out.shape[1] == shape[1]:
        return context_parallel_unshard(mesh, [out], [2])[0], "sequence"
    if out.shape[1] * world == shape[1] and out.shape[2] == shape[2]:
        parts, where = [torch.empty_like(out) for _ in range(world)], [torch.empty_like(pos) for _ in range(world)]
        dist.all_gather(parts, out.contiguous())  # CP: head groups back in rank order
        dist.all_gather(where, pos.contiguous())  # CP: the position of each row of the sequence
        order = torch.cat(where, dim=2).flatten().long()
        whole = torch.empty_like(torch.cat(parts, dim=1))
        whole[:, :, order] = torch.cat(parts, dim=1)
        return whole, "heads"
    raise RuntimeError(f"torch context_parallel returned a local output of shape {tuple(out.shape)} "
                       f"for inputs of shape {tuple(shape)}: neither a sequence nor a head split")


def reference(q, k, v, causal: bool):
    """The same attention on one process (SDPA on the whole sequence): output and dq."""
    ql = q.detach().clone().requires_grad_()
    out = F.scaled_dot_product_attention(ql, k, v, is_causal=causal)
    out.float().square().sum().backward()
    return out.detach(), ql.grad


def run(q, k, v, *, causal: bool, mesh=None) -> dict:
    """Run torch's context_parallel on this process group (every rank calls it): a dict of what
    happened. status 'ran' (forward right or not: out_err; backward: grad_err, or
    backward_error when torch raised there) or 'failed' (the forward raised: error)."""
    from torch.distributed.tensor.debug import CommDebugMode
    mesh = mesh if mesh is not None else _mesh(q.device)
    out_ref, dq_ref = reference(q, k, v, causal)
    row = {"impl": "torch", "causal": causal, "backend": dist.get_backend(), "upstream": UPSTREAM}
    try:  # once uncounted first: DTensor's sharding search for the op (CPU: ~15 s the first
        sharded_sdpa(q, k, v, causal, mesh)  # time) is cached, and is slower under CommDebugMode
        out, dq, error, counts = sharded_sdpa(q, k, v, causal, mesh, CommDebugMode())
    except Exception as exc:  # noqa: BLE001 -- the point is to show what torch raises here
        return {**row, "status": "failed", "error": first_line(exc)}
    split = counts.pop("output split")
    return {**row, "status": "ran", "out_err": (out - out_ref).abs().max().item(),
            "grad_err": None if dq is None else (dq - dq_ref).abs().max().item(),
            "backward_error": error, "collectives": counts, "output_split": split,
            "ring": any(any(r in name for r in RING_OPS) for name in counts)}


def describe(row: dict) -> str:
    """One sentence from `run`'s dict."""
    mask = "causal" if row["causal"] else "non-causal"
    if row["status"] == "failed":
        return (f"torch context_parallel, {mask}, {row['backend']}: raised {row['error']} "
                f"(a related upstream report, context parallelism failing on CPU attention kernels: {row['upstream']}).")
    ops = ", ".join(f"{n} x{c}" for n, c in sorted(row["collectives"].items())) or "none"
    how = "a ring (K/V rotated)" if row["ring"] else "NOT a ring: no K/V rotation"
    back = (f"backward raised {row['backward_error']} (a related upstream report, context parallelism failing on CPU attention kernels: {row['upstream']})"
            if row["backward_error"] else f"dq max |error| {row['grad_err']:.1e}")
    split = ("" if row.get("output_split", "sequence") == "sequence" else
             f" (its output came back split by {row['output_split']}, the sequence whole in torch's "
             "load-balanced order: DTensor chose another sharding for the op)")
    return (f"torch context_parallel, {mask}, {row['backend']}: forward max |error| "
            f"{row['out_err']:.1e} against one process{split}, its collectives {ops} -- {how}; {back}.")
