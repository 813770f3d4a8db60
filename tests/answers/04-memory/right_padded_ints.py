# expect: solved
# why: whole bytes on ceil(p / d) elements per rank (DeepSpeed's padded partitions), numpy ints returned, the d found with a while loop
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)   # the exercise's model and precision
M_A = memory.activation_bytes(**{k: v for k, v in EX_ACT.items() if k != "k_h"})   # bytes per GPU

import numpy as np


def model_state_bytes(p, d, stage):
    share = -(-p // d)                                   # ceil: the padded partition
    held = [share if stage >= s else p for s in (3, 2, 1)]
    return np.int64(np.dot([2, 2, 12], held))



def smallest_d(gpu_bytes):
    d = 1
    while model_state_bytes(EXERCISE_P, d, 3) + M_A > gpu_bytes:
        d += 1
    return np.int64(d)


d_16gb_answer = smallest_d(16 * GiB)
d_80gb_answer = smallest_d(80 * GiB)
