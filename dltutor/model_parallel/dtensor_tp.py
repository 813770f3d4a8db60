"""Torch's own tensor parallelism for the same blocks: a DeviceMesh, DTensor parameters, and the
ColwiseParallel / RowwiseParallel plan that `parallelize_module` applies (gloo on CPUs, nccl on
GPUs). The from-scratch `dltutor.model_parallel.tensor` layers are checked against it."""
from __future__ import annotations

import copy

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from dltutor.model_parallel.tensor import MLP, Attention


def plan_for(block) -> dict:
    """The Megatron split as torch spells it: first linear(s) column-wise, the last row-wise."""
    if isinstance(block, MLP):
        return {"up": ColwiseParallel(), "down": RowwiseParallel()}
    if isinstance(block, Attention):
        return {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                "o": RowwiseParallel()}
    raise TypeError(f"no tensor-parallel plan for {type(block).__name__}")


def tp_mesh(device, world_size: int):
    """A 1-D DeviceMesh over every rank, named 'tp', on the device type the ranks use."""
    return init_device_mesh(device.type, (world_size,), mesh_dim_names=("tp",))


def parallelized_copy(block, mesh):
    """A deep copy of `block` with its parameters turned into DTensors sharded over `mesh`."""
    return parallelize_module(copy.deepcopy(block), mesh, plan_for(block))


def local_grads(block) -> dict:
    """name -> this rank's shard of each gradient (a DTensor's local tensor)."""
    return {n: (p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad)
            for n, p in block.named_parameters()}


def full_grads(block) -> dict:
    """name -> the whole gradient, gathered from the shards (a collective: every rank calls it)."""
    return {n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad)
            for n, p in block.named_parameters()}


def forward_backward_counted(block, x, loss_fn):
    """Run forward and backward under CommDebugMode: (output, {'forward': n, 'backward': n})
    collective calls, as torch's own tracer counts them."""
    counts = {}
    with CommDebugMode() as mode:
        out = block(x)
        counts["forward"] = mode.get_total_counts()
    with CommDebugMode() as mode:
        loss_fn(out).backward()
        counts["backward"] = mode.get_total_counts()
    return torch.as_tensor(out), counts
