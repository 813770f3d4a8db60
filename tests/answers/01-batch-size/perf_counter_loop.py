# expect: solved
# why: a hand-written timing loop: warm-up steps, a synchronisation around the clock, numpy float64
import time

import numpy as np
import torch
import torch.nn.functional as F


def measure(batch_size, warmup=2):
    dev = torch.device(device)  # noqa: F821
    model = models.cifar_resnet(width=WIDTH).to(dev).train()  # noqa: F821
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = loaders.DeviceLoader(x_train, y_train, batch_size=batch_size)  # noqa: F821

    def forever():
        while True:
            yield from batches

    it = forever()

    def step():
        x, y = next(it)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        return x.shape[0]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    images = sum(step() for _ in range(SPEED_STEPS))  # noqa: F821
    sync()
    return np.float64(images / (time.perf_counter() - t0))


BATCH_SIZES = [128, 32, 16]
results = {}
for bs in BATCH_SIZES:
    results[bs] = measure(bs)
best_batch_size = sorted(results.items(), key=lambda kv: kv[1])[-1][0]
