# expect: wrong
# names: returned float64.*whole numbers.*use //
# why: numpy's floor of a true division is a whole float (2.0), not a whole number
import numpy as np


def place(rank, tp, pp, dp, gpus_per_node):
    return rank % tp, np.floor(rank / tp) % pp, np.floor(rank / (tp * pp))
