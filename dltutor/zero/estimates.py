"""DeepSpeed's ZeRO-3 estimator beside the course's formula: what its extra bytes are.

    largest_layer(h_dim=1024, ff_dim=4096, vocab=30522)   # (params, name) of build_bert's largest
    terms = estimator_terms(p, largest, d=2)              # its terms, read off the installed code
    estimator_findings(p, largest, d=2, layer="the decoder")   # the sentences notebook 04 prints

DeepSpeed's `estimate_zero3_model_states_mem_needs` (deepspeed.runtime.zero.stage3) is called,
not re-implemented: once with the parameters alone (bytes per parameter, divided by d), once
with the largest layer alone (bytes per parameter of that layer, on every GPU), and once with
both, so the sentences say how much of its figure these two terms make up. "Largest layer" is
its own definition (`stage3.model_to_params`): the parameters of one module, not its children.
"""
from __future__ import annotations

import inspect

from dltutor.core.units import GiB
from dltutor.zero import memory

_PROBE = 10 ** 6      # parameters of the probes that read one coefficient each


def largest_layer(h_dim: int, ff_dim: int, vocab: int = 30522,
                  seq_len: int = 512) -> tuple[int, str]:
    """(parameters, name) of `dltutor.zero.bert.build_bert`'s largest module, counted on paper as
    DeepSpeed's `model_to_params` counts it (a module's own parameters, biases included)."""
    sizes = {"decoder": h_dim * vocab + vocab, "tok": vocab * h_dim, "pos": seq_len * h_dim,
             "qkv": 3 * h_dim * h_dim + 3 * h_dim, "ff1": h_dim * ff_dim + ff_dim,
             "ff2": ff_dim * h_dim + h_dim, "head": h_dim * h_dim + h_dim}
    name = max(sizes, key=sizes.get)
    return sizes[name], name


def _gpu_bytes(total: int, largest: int, d: int, **kw) -> int:
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as est
    return est(total, largest, num_gpus_per_node=d, num_nodes=1, cpu_offload=False,
               cpu_offload_params=False, zero_init=True, **kw)[1]


def estimator_terms(p: int, largest: int, d: int) -> dict:
    """DeepSpeed's per-GPU estimate at stage 3 without offload on one node of `d` GPUs, and its
    terms as the installed estimator computes them: bytes per parameter (/ d), bytes per
    parameter of the largest layer, what is left over, and whether its buffer factor moves it."""
    import deepspeed
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as est
    factor = inspect.signature(est).parameters["additional_buffer_factor"].default
    gpu = _gpu_bytes(p, largest, d)
    per_param = _gpu_bytes(d * _PROBE, 0, d) / _PROBE
    per_layer = _gpu_bytes(0, _PROBE, d) / _PROBE
    return dict(version=deepspeed.__version__, gpu=gpu, per_param=per_param, per_layer=per_layer,
                params_term=per_param * p / d, layer_term=per_layer * largest,
                rest=gpu - per_param * p / d - per_layer * largest, buffer_factor=factor,
                gpu_without_factor=_gpu_bytes(p, largest, d, additional_buffer_factor=1.0))


def _g(x: float) -> str:
    return f"{x / GiB:.2f} GiB"


def estimator_findings(p: int, largest: int, d: int, layer: str = "", k_l: int = 2,
                       k_h: int = 4) -> list[str]:
    """Our stage-3 model states (k_l gradients) against DeepSpeed's estimate, and what its extra
    bytes are, term by term (`estimator_terms`)."""
    t = estimator_terms(p, largest, d)
    ours = memory.estimate_zero_memory(p, k_l=k_l, k_h=k_h, d=d, z=3).model_states
    fp32_grads = memory.estimate_zero_memory(p, k_l=k_l, k_h=k_h, d=d, z=3, k_g=k_h).model_states
    ours_per = ours * d / p
    out = [f"DeepSpeed {t['version']}, stage 3 without offload, {d} GPUs on one node: "
           f"{_g(t['gpu'])} per GPU vs our {_g(ours)} of model states: {_g(t['gpu'] - ours)} more."]
    what = (f"the {t['per_param'] - ours_per:g} more are our formula's gradients counted in fp32 "
            f"(k_g = k_h = {k_h}, not k_l = {k_l}), {_g(t['params_term'] - ours)}"
            if abs(t["params_term"] - fp32_grads) < 1 else
            f"{t['per_param'] - ours_per:g} more than ours, {_g(t['params_term'] - ours)}")
    named = f", {layer}" if layer else ""
    out.append(f"Its estimator (`estimate_zero3_model_states_mem_needs`, called with the "
               f"parameters alone, then with the largest layer alone) counts {t['per_param']:g} "
               f"bytes per parameter divided by d where we count {ours_per:g}: {what}; plus "
               f"{t['per_layer']:g} bytes per parameter of the largest layer, gathered in full on "
               f"every GPU ({largest:,} parameters{named}): {_g(t['layer_term'])}.")
    if abs(t["rest"]) < 1:
        buffers = ("its additional_buffer_factor "
                   f"({t['buffer_factor']:g}) changes only the per-CPU column"
                   if t["gpu_without_factor"] == t["gpu"] else
                   f"its additional_buffer_factor ({t['buffer_factor']:g}) moves the GPU "
                   "figure too")
        out.append("These two terms are the whole of its per-GPU figure (to the byte): it counts "
                   f"no buffers and no activations; {buffers}.")
    else:
        out.append(f"These two terms leave {t['rest']:,.0f} bytes of its per-GPU figure "
                   "unexplained.")
    return out


__all__ = ["estimator_findings", "estimator_terms", "largest_layer"]
