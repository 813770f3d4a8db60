"""One table row of notebook 04 from one rank's DLTUTOR_METRICS dict (the labs of
course/labs/04_deepspeed), and the speed of one run: mean samples/s of its steady steps ± 95 % CI.

    row = row_of(metrics, "zero3", nproc=2)    # memory in MiB per rank, formula, speed, losses
    rate_spread(samples_per_s, step_s)         # (mean rate, ±) over the steps after the meter step
"""
from __future__ import annotations

import math

from dltutor.core.spread import rate_ci
from dltutor.core.units import MiB

LABELS = {"zero0": "stage 0", "zero1": "stage 1", "zero2": "stage 2", "zero3": "stage 3",
          "zero3_offload_cpu": "stage 3 + CPU offload", "zero3_offload_nvme": "stage 3 + NVMe",
          "plain": "plain PyTorch", "fsdp2": "FSDP2 (fully_shard)"}


def row_of(m: dict, config: str, nproc: int) -> dict:
    """One table row from a rank's DLTUTOR_METRICS dict."""
    held = m.get("model_state_bytes") or {}
    pred = m.get("predicted") or {}
    row = dict(config=config, label=LABELS.get(config, config), ranks=nproc,
               stage=m.get("stage"), offload=m.get("offload"), params=m.get("params"),
               dtype=m.get("dtype"),
               **{f"{k}_MiB": held.get(k, 0) / MiB for k in ("params", "grads", "optimizer")})
    row["measured"] = held.get("total", 0) / MiB
    row["predicted"] = pred.get("model_states", 0) / MiB
    row["ratio"] = row["measured"] / row["predicted"] if row["predicted"] else None
    row["samples_per_s_lab"] = m.get("samples_per_s")
    row["samples_per_s"], row["samples_per_s_spread"] = rate_spread(m.get("samples_per_s"), m.get("step_s"))
    row["peak_rss"] = (m.get("VmHWM") or m.get("peak_rss") or 0) / MiB
    row["losses"] = m.get("losses")
    row["budget_MiB"] = (m.get("budget_bytes") or 0) / MiB or None
    return row


METER_STEPS = 1   # the labs' first timed step (--measure_iter 1) also runs the memory meter


def rate_spread(samples_per_s, step_s, warmup: int = METER_STEPS) -> tuple[float | None, float]:
    """(mean samples/s, its 95 % CI) over the per-step rates (each timed step alone) after the
    first `warmup` timed steps; (the lab's rate, nan) when no per-step times came back, nan ± where
    fewer than 2 steady steps are left (one value has no interval)."""
    if not samples_per_s or not step_s or len(step_s) <= warmup:
        return samples_per_s, math.nan
    per_step = samples_per_s * sum(step_s) / len(step_s)      # samples in one step
    return rate_ci([per_step / t for t in step_s if t > 0], warmup=warmup)
