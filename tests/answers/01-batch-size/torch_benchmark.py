# expect: solved
# why: torch.utils.benchmark.Timer (it warms up and synchronises CUDA itself), with the kernel's threads
import numpy as np
import torch
from torch.utils import benchmark


def measure(batch_size):
    model = models.cifar_resnet(width=WIDTH).to(device)  # noqa: F821
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = loaders.DeviceLoader(x_train, y_train, batch_size=batch_size)  # noqa: F821
    data = iter(())

    def train_one_batch():
        nonlocal data
        try:
            x, y = next(data)
        except StopIteration:
            data = iter(loader)
            x, y = next(data)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    train_one_batch()
    timer = benchmark.Timer(stmt="train_one_batch()", globals={"train_one_batch": train_one_batch},
                            num_threads=torch.get_num_threads())
    seconds_per_step = timer.timeit(SPEED_STEPS).mean  # noqa: F821
    return batch_size / seconds_per_step


BATCH_SIZES = np.array([16, 48, 96])
results = {int(bs): measure(bs) for bs in BATCH_SIZES}
best_batch_size = np.int64(max(results, key=lambda bs: results[bs]))
