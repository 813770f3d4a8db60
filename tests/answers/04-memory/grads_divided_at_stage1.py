# expect: wrong
# names: stage-1 value matches stage 2
# why: stage 1 partitions the gradients as well as the optimizer states
EX_ACT = dict(s=512, b=1, h=4096, L=48, a=32, k_l=2, k_h=4)   # the exercise's model and precision
M_A = memory.activation_bytes(**{k: v for k, v in EX_ACT.items() if k != "k_h"})   # bytes per GPU

def model_state_bytes(p, d, stage):
    params = 2 * p / (d if stage >= 3 else 1)
    grads = 2 * p / (d if stage >= 1 else 1)
    optim = 12 * p / (d if stage >= 1 else 1)
    return params + grads + optim


d_16gb_answer = next(d for d in range(1, 4097)
                     if model_state_bytes(EXERCISE_P, d, 3) + M_A <= 16 * GiB)
d_80gb_answer = next(d for d in range(1, 4097)
                     if model_state_bytes(EXERCISE_P, d, 3) + M_A <= 80 * GiB)
