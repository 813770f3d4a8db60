"""PyTorch's own sharding (FSDP2, `torch.distributed.fsdp.fully_shard`) on notebook 04's BERT.

FSDP2 is ZeRO-3 built into PyTorch: every parameter becomes a DTensor sharded along dim 0 over
the ranks; each encoder layer (and the root: embeddings and MLM head) is a unit that is
all-gathered just before its forward/backward and freed after; gradients are reduce-scattered
to the same shards, and the optimizer updates only the shard a rank owns.

    model, mixed = shard_bert(model, ctx.device, param_dtype)   # the rank's side
    held = held_bytes(model, optimizer)        # params / grads / optimizer bytes this rank holds
    est = predicted(p, d)                      # the formula for what FSDP2 holds per rank

What a rank holds, and why it differs from DeepSpeed's ZeRO-3: FSDP2 keeps the sharded parameters
in their original fp32 and the optimizer updates them in place, so there is no separate fp32
master copy — 4 p (params) + 4 p (grads) + 8 p (Adam's two moments) = 16 p / d per rank, in fp32
and in mixed precision alike (`MixedPrecisionPolicy` only casts the gathered copy). DeepSpeed
keeps low-precision parameters and gradients plus an fp32 master partition: 16 p / d in fp16,
but 20 p / d in fp32 (k_l = k_h = 4, the formula of `dltutor.zero.memory` with a master copy).
"""
from __future__ import annotations

import time

from dltutor.core.device import amp_dtype, synchronize
from dltutor.core.units import MiB
from dltutor.zero import bert_lab, memory
from dltutor.zero.bert import build_bert

DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def param_dtype_name(requested: str, dev) -> str:
    """The dtype the gathered parameters compute in: --dtype, or for 'auto' the device's own
    (core.device.amp_dtype on a GPU: bf16 on Ampere and newer, fp16 before), fp32 on a CPU."""
    if requested != "auto":
        return requested
    if getattr(dev, "type", str(dev)) != "cuda":
        return "fp32"
    import torch
    return "bf16" if amp_dtype(dev) == torch.bfloat16 else "fp16"


def shard_bert(model, dev, dtype_name: str = "fp32", world_size: int | None = None):
    """fully_shard every encoder layer, then the root (embeddings + head); returns the model.

    Below fp32, a MixedPrecisionPolicy gathers parameters in `dtype_name` for compute and
    reduces gradients in fp32; the shards themselves stay fp32.
    """
    import torch
    import torch.distributed as tdist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    world = world_size or tdist.get_world_size()
    mesh = init_device_mesh(getattr(dev, "type", str(dev)), (world,))  # FSDP: 1-D mesh of ranks
    policy = MixedPrecisionPolicy()                                    # FSDP: fp32: no casts
    if dtype_name != "fp32":
        policy = MixedPrecisionPolicy(param_dtype=getattr(torch, DTYPES[dtype_name]),
                                      reduce_dtype=torch.float32)      # FSDP: compute in bf16/fp16
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)                # FSDP: one unit per layer
    fully_shard(model, mesh=mesh, mp_policy=policy)                    # FSDP: the rest (root)
    return model


def _local(t):
    """The part of `t` this rank really holds: a DTensor's local shard, a plain tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def held_bytes(model, optimizer=None) -> dict:
    """Bytes of parameters, gradients and optimizer state held by this rank (local shards only).

    Sums numel * element size of each DTensor's `to_local()` (FSDP2's padding for an uneven
    last shard is not counted) and of every tensor in the optimizer's state, each tensor once.
    """
    import torch
    sums, seen = dict(params=0, grads=0, optimizer=0), set()

    def add(kind, t):
        if t is None or id(t) in seen:      # id of the living tensor, not of a fresh view
            return
        seen.add(id(t))
        local = _local(t)
        sums[kind] += local.numel() * local.element_size()
    for prm in model.parameters():
        add("params", prm)
        add("grads", prm.grad)
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    add("optimizer", value)
    sums["total"] = sum(sums.values())
    return sums


def predicted(p: int, d: int) -> memory.MemoryEstimate:
    """The formula for FSDP2's model states per rank: stage 3 sharding of fp32 parameters,
    gradients and Adam's two moments, no master copy (16 p / d bytes)."""
    return memory.estimate_zero_memory(p, k_l=4, k_h=4, d=d, z=3, master_copy=False)


def mean_over_ranks(value, ctx) -> float:
    """A scalar tensor averaged over the ranks (each saw its own batch), as a float."""
    import torch.distributed as tdist
    value = value.detach().float()
    if ctx.world_size > 1:
        value = value.clone()
        tdist.all_reduce(value)                                        # FSDP: printout only
        value /= ctx.world_size
    return float(value)


def run(args, ctx):
    """Build the lab's BERT, shard it with FSDP2, train `args.num_iterations` steps of Adam;
    returns (metrics, model, optimizer).

    Same seed, data (`bert_lab.rank_batch`) and lr as the ZeRO labs, so in fp32 the loss
    trajectory equals ZeRO stage 0's. Model-state bytes are counted after the backward of
    iteration `args.measure_iter` (default 1: Adam's moments exist, the gradients not yet freed).
    """
    import torch
    from dltutor.core import env
    from dltutor.core.train_step import train_step
    dtype_name = param_dtype_name(args.dtype, ctx.device)
    env.seed_everything(args.seed, 0)                 # same initial weights on every rank
    phase = "model construction"
    try:
        model = build_bert(**bert_lab.model_flags(args)).to(ctx.device)
        n_params = sum(p.numel() for p in model.parameters())
        shard_bert(model, ctx.device, dtype_name, ctx.world_size)       # FSDP: shard it
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)          # FSDP: Adam on shards
        # fp16 compute needs loss scaling (bf16 and fp32 do not); GradScaler handles DTensors
        scaler = torch.amp.GradScaler(ctx.device.type) if dtype_name == "fp16" else None
        losses, t0 = [], None
        held = dict(params=0, grads=0, optimizer=0, total=0)   # stays 0 if never measured

        def sample_held():                               # after backward: all three kinds exist
            nonlocal held
            held = held_bytes(model, opt)
        for step in range(args.num_iterations):
            phase = f"iteration {step}"
            if step == 1:
                synchronize(ctx.device)
                t0 = time.perf_counter()
            tokens, labels = bert_lab.rank_batch(args, ctx, step, ctx.device)
            # FSDP: forward gathers each layer then frees it; backward reduce-scatters gradients
            loss, _ = train_step(model, opt, tokens, labels, loss_fn=None, scaler=scaler,
                                 before_step=sample_held if step == args.measure_iter else None)
            losses.append(mean_over_ranks(loss, ctx))
        synchronize(ctx.device)
        elapsed = time.perf_counter() - t0 if t0 else float("nan")
    except (RuntimeError, MemoryError) as exc:
        bert_lab.report_oom(phase, exc)
        raise
    timed = args.num_iterations - 1
    out = dict(lab="train_bert_fsdp", engine="fsdp2", stage=3, offload="none", dtype=dtype_name,
               params=n_params, start_step=0, losses=losses,
               samples_per_s=timed * args.batch_size * ctx.world_size / elapsed if timed
               else None, model_state_bytes=held,
               predicted=predicted(n_params, ctx.world_size).as_dict(),
               **memory.peak_memory_bytes(ctx.device))
    return out, model, opt


# ---------------------------------------------------------------- kernel side: compare runs
def loss_gap(losses, reference) -> float:
    """Largest relative difference between two loss trajectories of the same length."""
    if len(losses) != len(reference):
        raise ValueError(f"trajectories differ in length: {len(losses)} vs {len(reference)}")
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference))


def memory_rows(rows) -> list[dict]:
    """Per-rank model-state MiB of each run row (dltutor.zero.runs), measured beside the formula."""
    out = []
    for r in rows:
        out.append(dict(run=r["label"], ranks=r["ranks"], params_MiB=r["params_MiB"],
                        grads_MiB=r["grads_MiB"], optimizer_MiB=r["optimizer_MiB"],
                        measured_MiB=r["measured"], formula_MiB=r["predicted"],
                        ratio=r["ratio"],
                        bytes_per_param_all_ranks=r["measured"] * MiB * r["ranks"] / r["params"]))
    return out
