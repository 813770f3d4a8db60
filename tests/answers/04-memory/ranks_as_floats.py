# expect: wrong
# names: a float: count ranks with ints
# why: the numbers of ranks solved for on paper with numpy: np.ceil gives float64 14.0, not a count
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)   # the exercise's model and precision
M_A = memory.activation_bytes(**{k: v for k, v in EX_ACT.items() if k != "k_h"})   # bytes per GPU

def model_state_bytes(p, d, stage):
    params = 2 * p / (d if stage >= 3 else 1)
    grads = 2 * p / (d if stage >= 2 else 1)
    optim = 12 * p / (d if stage >= 1 else 1)
    return params + grads + optim


import numpy as np

d_16gb_answer = np.ceil(16 * EXERCISE_P / (16 * GiB - M_A))      # float64 14.0
d_80gb_answer = np.ceil(16 * EXERCISE_P / (80 * GiB - M_A))
