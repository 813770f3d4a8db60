"""Scaling arithmetic for data parallelism: batch sizes, the linear LR rule, warm-up, efficiency.

Data parallelism with W ranks, each taking a per-rank batch b, trains on a global batch B = W x b.

* Weak scaling keeps b fixed, so B grows with W (more work per step, same work per rank).
* Strong scaling keeps B fixed and splits it, b = B / W (same work per step, less per rank).

The linear scaling rule (Goyal et al., 2017) says: when the global batch grows k-fold, multiply the
learning rate by k, lr = base_lr x B / B_base; with weak scaling k = W. A large k makes the first
steps unstable, so the rate is ramped up linearly over a few hundred steps (warm-up).

Efficiency compares a run on `scale` times the resources with the base run:
  speedup            S = P_scale / P_base                       (P = throughput, images/s)
  weak efficiency    E = P_scale / (P_base x scale)             (work per rank held fixed)
  strong efficiency  E = T_base / (T_scale x scale) = S / scale (total work held fixed; T = time)
"""
from __future__ import annotations


# ---------------------------------------------------------------- batch sizes and the LR rule
def split_batch(world_size: int, scaling: str = "weak", per_rank_batch: int | None = None,
                global_batch: int | None = None) -> tuple[int, int]:
    """`(per_rank_batch, global_batch)` for `weak` (fixed per-rank) or `strong` (fixed global)."""
    w = int(world_size)
    if w < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if scaling == "weak":
        if not per_rank_batch or per_rank_batch < 1:
            raise ValueError("weak scaling needs per_rank_batch >= 1")
        return int(per_rank_batch), int(per_rank_batch) * w
    if scaling == "strong":
        if not global_batch or global_batch < 1:
            raise ValueError("strong scaling needs global_batch >= 1")
        if global_batch % w:
            raise ValueError(f"strong scaling: global batch {global_batch} does not split evenly "
                             f"over {w} ranks; pick a multiple of {w}")
        return int(global_batch) // w, int(global_batch)
    raise ValueError(f"scaling must be 'weak' or 'strong', got {scaling!r}")


def effective_batch(per_rank_batch: int, world_size: int, accumulation_steps: int = 1) -> int:
    """Images that contribute to one optimizer step: b x W x accumulation steps."""
    return int(per_rank_batch) * int(world_size) * int(accumulation_steps)


def scaled_lr(base_lr: float, world_size: int = 1, *, global_batch: int | None = None,
              base_batch: int | None = None) -> float:
    """Linear scaling rule: `base_lr x world_size`, or `base_lr x global_batch / base_batch`.

    `base_lr` is the rate tuned for one rank (or for `base_batch` images per step).
    """
    if global_batch is not None or base_batch is not None:
        if not global_batch or not base_batch:
            raise ValueError("give both global_batch and base_batch (or neither)")
        return float(base_lr) * float(global_batch) / float(base_batch)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    return float(base_lr) * int(world_size)


def warmup_factor(step: int, warmup_steps: int, start_factor: float = 0.0) -> float:
    """Multiplier of the peak LR at `step` (0-based): linear from `start_factor` to 1, then 1.

    Goyal et al. start from the unscaled rate: `start_factor = 1 / k` for a k-fold scaled LR.
    """
    if warmup_steps <= 0 or step >= warmup_steps:
        return 1.0
    frac = (step + 1) / warmup_steps  # the last warm-up step reaches the peak
    return start_factor + (1.0 - start_factor) * frac


def warmup_schedule(peak_lr: float, total_steps: int, warmup_steps: int = 0,
                    start_factor: float = 0.0) -> list[float]:
    """The LR of every step 0..total_steps-1 (linear warm-up, then constant)."""
    return [peak_lr * warmup_factor(s, warmup_steps, start_factor) for s in range(total_steps)]


def warmup_scheduler(optimizer, warmup_steps: int, start_factor: float = 0.0):
    """A `torch.optim.lr_scheduler.LambdaLR` doing `warmup_factor`; call `.step()` after each step."""
    from torch.optim.lr_scheduler import LambdaLR
    return LambdaLR(optimizer, lambda s: warmup_factor(s, warmup_steps, start_factor))


# ---------------------------------------------------------------- efficiency
def speedup(p_scale: float, p_base: float) -> float:
    """Throughput ratio P_scale / P_base (images/s, or any rate)."""
    if p_base <= 0:
        raise ValueError("base throughput must be > 0")
    return float(p_scale) / float(p_base)


def weak_efficiency(p_scale: float, p_base: float, scale: float) -> float:
    """P_scale / (P_base x scale): 1.0 means every added rank adds a full rank's throughput."""
    if scale <= 0:
        raise ValueError("scale must be > 0")
    return speedup(p_scale, p_base) / float(scale)


def strong_efficiency(t_base: float, t_scale: float, scale: float) -> float:
    """T_base / (T_scale x scale) for a fixed total job: 1.0 means scale x resources, 1/scale time.

    With throughputs of the same fixed job this equals `speedup(P_scale, P_base) / scale`.
    """
    if t_scale <= 0 or scale <= 0:
        raise ValueError("time and scale must be > 0")
    return float(t_base) / (float(t_scale) * float(scale))


def scaling_table(runs: list[dict], rate: str = "global_img_per_s", ranks: str = "world_size",
                  group: str = "scaling") -> list[dict]:
    """Add speedup and efficiency to per-run rows, relative to the row with the fewest ranks.

    Each row has `ranks` (a count), `rate` (a throughput) and `group`: rows are compared only
    within their group (weak vs strong scaling in lab 02, the engine in lab 03).
    efficiency = speedup / (ranks / base ranks), i.e. `weak_efficiency`.
    """
    out = []
    for kind in dict.fromkeys(r.get(group) for r in runs):
        members = sorted((r for r in runs if r.get(group) == kind), key=lambda r: r[ranks])
        base = members[0]
        for r in members:
            scale = r[ranks] / base[ranks]
            out.append({**r, "speedup": speedup(r[rate], base[rate]),
                        "efficiency": weak_efficiency(r[rate], base[rate], scale)})
    return out


def summarize(metrics: list[dict]) -> dict:
    """One row for a launch from the per-rank `DLTUTOR_METRICS` dicts of the lab (rank 0 first).

    `rate_spread`: the 95 % CI of the mean per-step img/s of the slowest rank (its timed
    `step_times_ms`), the ± `dltutor.ddp.findings.scaling` compares efficiencies with.
    """
    m0 = metrics[0]
    keys = ("world_size", "scaling", "per_rank_batch", "global_batch", "lr", "global_img_per_s",
            "step_time_ms", "hardware", "data", "bucket_cap_mb", "overlap", "threads", "shape")
    row = {k: m0.get(k) for k in keys}
    row["img_per_s_per_rank"] = [m.get("img_per_s") for m in metrics]
    from dltutor.ddp.findings import rate_spread, slowest
    row["rate_spread"] = rate_spread(m0["global_batch"], slowest(metrics).get("step_times_ms"))
    return row
