# expect: solved
# why: numpy's unravel_index over the (dp, pp, tp) array, numpy integers returned
import numpy as np


def place(rank, tp, pp, dp, gpus_per_node):
    d, p, t = np.unravel_index(rank, (dp, pp, tp))
    return t, p, d
