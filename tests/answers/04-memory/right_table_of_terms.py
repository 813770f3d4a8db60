# expect: solved
# why: a table of (bytes per parameter, first stage that partitions it), int() of the total as DeepSpeed's estimators do, a one-element float64 tensor for d = 1
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)   # the exercise's model and precision
M_A = memory.activation_bytes(**{k: v for k, v in EX_ACT.items() if k != "k_h"})   # bytes per GPU

import torch

TERMS = {"parameters": (2, 3), "gradients": (2, 2), "optimizer": (4 + 4 + 4, 1)}


def model_state_bytes(p, d, stage):
    total = 0.0
    for per_param, first_stage in TERMS.values():
        total += per_param * p / (d if stage >= first_stage else 1)
    if d == 1:
        return torch.tensor([total], dtype=torch.float64)
    return int(total)


fits = {gb: [d for d in range(1, 200)
             if float(model_state_bytes(EXERCISE_P, d, 3)) + M_A <= gb * GiB] for gb in (16, 80)}
d_16gb_answer, d_80gb_answer = min(fits[16]), min(fits[80])
