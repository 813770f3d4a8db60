# expect: wrong
# names: looks like GiB: return bytes
# why: returns GiB instead of bytes (and sizes the GPUs in GiB accordingly)
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)   # the exercise's model and precision
M_A = memory.activation_bytes(**{k: v for k, v in EX_ACT.items() if k != "k_h"})   # bytes per GPU

def model_state_bytes(p, d, stage):
    total = 2 * p / (d if stage >= 3 else 1) + 2 * p / (d if stage >= 2 else 1) \
        + 12 * p / (d if stage >= 1 else 1)
    return total / GiB


d_16gb_answer = next(d for d in range(1, 4097)
                     if model_state_bytes(EXERCISE_P, d, 3) + M_A / GiB <= 16)
d_80gb_answer = next(d for d in range(1, 4097)
                     if model_state_bytes(EXERCISE_P, d, 3) + M_A / GiB <= 80)
