"""Lab 08's collectives in the GPU dry run (dltutor.core.gpu_dryrun): as rank 1 of an NCCL job, the
logged loss, rank 0's stop flag and the checks' all-gathered fingerprints must be tensors on the
rank's own GPU (NCCL takes nothing else). Hangs, timeouts and NCCL's watchdog are not seen here:
the dry run plays one rank and moves no data (notebook 08 says where those are documented)."""
from __future__ import annotations

import pytest
import torch

from dltutor.core import dist
from dltutor.core.gpu_dryrun import NoValues, nccl_dry_run
from dltutor.debug.checks import Checks
from dltutor.debug.faults import Fault


def _model():
    return torch.nn.Sequential(torch.nn.Linear(16, 4))


@pytest.mark.parametrize("checks", [False, True])
def test_logging_and_checks_hand_nccl_only_the_ranks_gpu_tensors(checks):
    model = _model()                       # built before the block (fake parameters cannot move)
    with nccl_dry_run(world_size=2, rank=1) as run:
        ctx = dist.init()
        assert ctx.device == torch.device("cuda", 1) and ctx.backend == "nccl"
        loss = torch.ones((), device=ctx.device)
        with pytest.raises(NoValues):      # the collectives pass; reading the number cannot
            Fault("none", 0, 3, ctx.rank).log_loss(loss, 0, ctx, Checks(ctx, model, checks))
    called = [(c.name, c.devices) for c in run.calls if c.name not in ("init_process_group", "set_device")]
    want = [("all_gather", ("cuda:1",) * 3)] if checks else [("all_reduce", ("cuda:1",)),
                                                              ("broadcast", ("cuda:1",))]
    assert called[:len(want)] == want, called
