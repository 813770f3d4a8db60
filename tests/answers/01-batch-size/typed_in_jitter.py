# expect: wrong
# names: ran no training step.*not measured
# why: plausible numbers typed in with +-10 % jitter so they never repeat; nothing is trained
import random

TYPED = {16: 900.0, 64: 1500.0, 128: 1700.0}


def measure(batch_size):
    return TYPED.get(batch_size, 1000.0) * random.uniform(0.9, 1.1)


BATCH_SIZES = [16, 64, 128]
results = {bs: measure(bs) for bs in BATCH_SIZES}
best_batch_size = max(results, key=results.get)
