# expect: wrong
# names: did not finish.*still inside a collective rank \d never called
# why: only a comment changed: the rank with more values still calls all_reduce more often
import torch
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

with dist.session() as ctx:
    for case in ex.cases():
        values = ex.my_values(ctx.rank, case)
        total = torch.zeros(1, dtype=torch.float64)
        for v in values:                          # I think this is fine now
            t = torch.tensor([v], dtype=torch.float64)
            tdist.all_reduce(t)
            total += t
        ex.report_total(total, case)
