# expect: wrong
# names: sleep.*cannot train more than.*does not come from timing
# why: it trains the right model at the right batch size, then returns a number typed in earlier (with jitter), not the measurement
import random

EARLIER = {}


def measure(batch_size):
    loader = loaders.DeviceLoader(x_train, y_train, batch_size=batch_size)  # noqa: F821
    model = models.cifar_resnet(width=WIDTH)  # noqa: F821
    got = speed.measure_throughput(model, loader, steps=SPEED_STEPS, device=device)  # noqa: F821
    EARLIER.setdefault(batch_size, got["img_per_s"])     # "I measured it once, that's enough"
    return EARLIER[batch_size] * random.uniform(0.95, 1.05)


BATCH_SIZES = [16, 64, 128]
results = {bs: measure(bs) for bs in BATCH_SIZES}
best_batch_size = max(results, key=results.get)
