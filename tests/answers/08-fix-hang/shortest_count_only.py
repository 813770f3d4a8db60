# expect: wrong
# names: values beyond the shortest rank's count were dropped
# why: agrees on the smallest count (all-reduce MIN) and all-reduces only that many values
import torch
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

with dist.session() as ctx:
    for case in ex.cases():
        values = ex.my_values(ctx.rank, case)
        n = torch.tensor([len(values)])
        tdist.all_reduce(n, op=tdist.ReduceOp.MIN)
        t = torch.tensor(values[:int(n)], dtype=torch.float64)
        tdist.all_reduce(t)
        ex.report_total(t.sum(), case)
