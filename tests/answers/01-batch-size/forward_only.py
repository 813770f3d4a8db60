# expect: wrong
# names: forward only|no backward
# why: times the model's forward pass (inference), not training steps
import time


def measure(batch_size):
    model = models.cifar_resnet(width=WIDTH).to(device)  # noqa: F821
    loader = loaders.DeviceLoader(x_train, y_train, batch_size=batch_size)  # noqa: F821
    batches = list(loader)
    model(batches[0][0])
    start = time.perf_counter()
    for x, _ in batches[:SPEED_STEPS]:  # noqa: F821
        model(x)
    return batch_size * min(SPEED_STEPS, len(batches)) / (time.perf_counter() - start)  # noqa: F821


BATCH_SIZES = [16, 64, 128]
results = {bs: measure(bs) for bs in BATCH_SIZES}
best_batch_size = max(results, key=results.get)
