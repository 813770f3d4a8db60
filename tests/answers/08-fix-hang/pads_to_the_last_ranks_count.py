# expect: wrong
# names: case 1 \(rank 0: \d+ values, rank 1: \d+ values\): rank 0 failed
# why: takes the last rank's count (broadcast from it) as everyone's length: wrong when rank 0 holds more
import torch
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

with dist.session() as ctx:
    for case in ex.cases():
        values = ex.my_values(ctx.rank, case)
        n = torch.tensor([len(values)])
        tdist.broadcast(n, src=ctx.world_size - 1)           # the last rank holds the most
        padded = torch.zeros(int(n), dtype=torch.float64)
        padded[:len(values)] = torch.tensor(values, dtype=torch.float64)
        tdist.all_reduce(padded)
        ex.report_total(padded.sum(), case)
