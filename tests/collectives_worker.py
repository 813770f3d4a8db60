"""Run under torchrun by tests/test_collectives.py: every point-to-point all-reduce vs dist.all_reduce.

Prints one `DLTUTOR_METRICS {json}` line per rank with the failures (empty when all agree) and the
bytes each algorithm's ring sent from this rank, to compare with the step model.
"""
import torch
import torch.distributed as dist

from dltutor.allreduce import collectives as C
from dltutor.core import dist as ddist

with ddist.session() as ctx:
    n, r = ctx.world_size, ctx.rank
    failures, sent = [], {"n": 0}
    real_isend = dist.isend

    def counting_isend(tensor, dst, *a, **k):
        sent["n"] += tensor.numel() * tensor.element_size()
        return real_isend(tensor, dst, *a, **k)

    lengths = sorted({1, max(1, n - 1), 7, 1001, 4099})
    for name in ("ring", "reduce_bcast", "recursive_doubling"):
        for dtype in (torch.float32, torch.float64, torch.int64):
            for i, numel in enumerate(lengths):
                ok, msg = C.check_against_all_reduce(C.ALLREDUCE[name], numel, dtype, seed=i)
                if not ok:
                    failures.append(f"{name} {msg}")
        # every rank must end with the very same bits
        x = C.random_tensor(1001, torch.float32, 77 + r)
        C.ALLREDUCE[name](x)
        first = x.clone()
        dist.broadcast(first, 0)
        if not torch.equal(first, x):
            failures.append(f"{name}: ranks disagree bitwise")
    # chunks longer than a segment travel as several messages (sizes that do not divide evenly)
    for dtype, numel in ((torch.float32, 4099), (torch.float64, 1001), (torch.int64, 37)):
        ok, msg = C.check_against_all_reduce(
            lambda t: C.ring_allreduce(t, segment_bytes=40), numel, dtype, seed=5)
        if not ok:
            failures.append(f"segmented ring {msg}")
    ring_bytes = {}
    dist.isend = counting_isend
    try:
        for numel in lengths:
            sent["n"] = 0
            C.ring_allreduce(torch.ones(numel, dtype=torch.float64))
            ring_bytes[numel] = sent["n"]
    finally:
        dist.isend = real_isend
    ddist.report(failures=failures, ring_bytes=ring_bytes)
