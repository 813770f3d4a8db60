# expect: wrong
# names: float32
# why: computed with torch tensors in the default float32: 7 digits cannot hold 10^11..10^13 bytes
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)   # the exercise's model and precision
M_A = memory.activation_bytes(**{k: v for k, v in EX_ACT.items() if k != "k_h"})   # bytes per GPU

import torch


def model_state_bytes(p, d, stage):
    div = torch.tensor([d if stage >= 3 else 1, d if stage >= 2 else 1, d if stage >= 1 else 1])
    return (torch.tensor([2, 2, 12]) * p / div).sum()


d_16gb_answer = next(d for d in range(1, 4097)
                     if model_state_bytes(EXERCISE_P, d, 3) + M_A <= 16 * GiB)
d_80gb_answer = next(d for d in range(1, 4097)
                     if model_state_bytes(EXERCISE_P, d, 3) + M_A <= 80 * GiB)
