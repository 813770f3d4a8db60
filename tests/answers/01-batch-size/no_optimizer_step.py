# expect: wrong
# names: never updated the weights
# why: forward and backward but no optimizer step: not a whole training step
import time

import torch


def measure(batch_size):
    model = models.cifar_resnet(width=WIDTH).to(device)  # noqa: F821
    loader = loaders.DeviceLoader(x_train, y_train, batch_size=batch_size)  # noqa: F821
    start, images = None, 0
    for i, (x, y) in enumerate(loader):
        if i == 1:
            start = time.perf_counter()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        images += len(x) if i >= 1 else 0
        if i == SPEED_STEPS:  # noqa: F821
            break
    return images / (time.perf_counter() - start)


BATCH_SIZES = [16, 64, 128]
results = {bs: measure(bs) for bs in BATCH_SIZES}
best_batch_size = max(results, key=results.get)
