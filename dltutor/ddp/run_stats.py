"""What the ranks agree on at the end of lab 02's run, in two all-reduces.

* `reduce_run_stats(losses, times, ...)`: the loss curve of the global batch (each rank's
  per-step losses, summed over the ranks and divided by W) and the busy time of the slowest rank
  (its summed step times, MAX over the ranks): the global img/s is set by the slowest rank.
Every tensor handed to the all-reduce is on the rank's device: NCCL moves only tensors on the
rank's own GPU (tests/test_gpu_dryrun.py checks this without a GPU).
"""
from __future__ import annotations


def reduce_run_stats(losses, times, timing_skip: int, world_size: int, dev, distributed: bool):
    """`(curve, timed, busy)`, all-reduced over the ranks when `distributed`.

    losses: this rank's per-step loss tensors (on `dev`); times: its step times in seconds, of
    which the first `timing_skip` are left out (all kept if that leaves none).
    curve: the mean loss of each step over the ranks, on `dev`; timed: this rank's kept step
    times (CPU, float64); busy: a one-element float64 tensor on `dev`, the slowest rank's summed
    kept step time.
    """
    import torch
    import torch.distributed as tdist

    curve = torch.stack(list(losses)).float()
    kept = list(times[timing_skip:] or times)
    busy = torch.tensor([sum(kept)], dtype=torch.float64, device=dev)  # on the GPU for NCCL
    if distributed:
        tdist.all_reduce(curve)  # the loss curve of the global batch = mean over ranks
        curve /= world_size
        tdist.all_reduce(busy, op=tdist.ReduceOp.MAX)  # the slowest rank sets the pace
    return curve, torch.tensor(kept, dtype=torch.float64), busy
