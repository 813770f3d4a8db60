# expect: wrong
# names: case 3 .*a length chosen in advance does not fit every case
# why: pads every rank to 16 values: the same collective only while no rank holds more than 16
import torch
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

PAD = 16

with dist.session() as ctx:
    for case in ex.cases():
        values = ex.my_values(ctx.rank, case)
        padded = torch.zeros(PAD, dtype=torch.float64)
        padded[:len(values)] = torch.tensor(values, dtype=torch.float64)
        tdist.all_reduce(padded)
        ex.report_total(padded.sum(), case)
