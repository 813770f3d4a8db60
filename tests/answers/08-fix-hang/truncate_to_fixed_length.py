# expect: wrong
# names: the first 512 values of each rank only.*a length chosen in advance
# why: cuts every rank to 512 values (padding the shorter ones): no hang, values dropped
import torch
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

LENGTH = 512

with dist.session() as ctx:
    for case in ex.cases():
        values = ex.my_values(ctx.rank, case)[:LENGTH]
        values = values + [0.0] * (LENGTH - len(values))
        t = torch.tensor(values, dtype=torch.float64)
        tdist.all_reduce(t)
        ex.report_total(t.sum(), case)
