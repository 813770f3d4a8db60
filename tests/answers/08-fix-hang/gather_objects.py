# expect: solved
# why: every rank gathers every rank's list (all_gather_object) and adds them up (a numpy float)
import numpy as np
import torch.distributed as tdist

from dltutor.core import dist
from dltutor.debug import exercise_hang as ex

with dist.session() as ctx:
    for case in ex.cases():
        mine = ex.my_values(ctx.rank, case)
        everyone = [None] * ctx.world_size
        tdist.all_gather_object(everyone, mine)
        ex.report_total(np.sum([np.sum(v) for v in everyone]), case)
