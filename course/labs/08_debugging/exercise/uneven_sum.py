"""Exercise (notebook 08): this script hangs. Make it finish with the right result.

In each case of ex.cases() every rank holds its own values (ex.my_values), a different number on
each rank (sometimes none, sometimes thousands); only that rank can read them. Each rank must
report the sum of all values of all ranks (ex.report_total). As handed out, it all-reduces one
value at a time.
"""
import torch
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

with dist.session() as ctx:
    for case in ex.cases():                       # several cases, other counts in each
        values = ex.my_values(ctx.rank, case)     # this rank's values only
        total = torch.zeros(1, dtype=torch.float64)
        for v in values:                          # one all-reduce per value
            t = torch.tensor([v], dtype=torch.float64)
            tdist.all_reduce(t)
            total += t
        ex.report_total(total, case)
