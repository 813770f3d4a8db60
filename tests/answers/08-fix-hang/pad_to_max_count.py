# expect: solved
# why: agrees on the longest count with an all-reduce MAX, pads to it, all-reduces element-wise
import torch
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

with dist.session() as ctx:
    for case in ex.cases():
        values = ex.my_values(ctx.rank, case)
        longest = torch.tensor([len(values)])
        tdist.all_reduce(longest, op=tdist.ReduceOp.MAX)
        padded = torch.zeros(int(longest.item()))             # float32, as a student would
        padded[:len(values)] = torch.tensor(values)
        tdist.all_reduce(padded)
        ex.report_total(padded.sum(), case)
