"""Solution of notebook 01's exercise (section 5): the fastest batch size, measured.

The code of the notebook's collapsed solution, as a student writes it in the notebook: it uses the
notebook's names (loaders, models, speed, x_train, y_train, WIDTH, SPEED_STEPS, device), so it is
not a script. `dltutor.single.exercise.check_solution(setup)` runs it with those names and checks
it like a student's answer; tests/test_exercises_io_single.py proves that check passes on it.
"""


def measure(batch_size):
    """Training images/s of a fresh ResNet fed from the device at `batch_size`."""
    loader = loaders.DeviceLoader(x_train, y_train, batch_size=batch_size)  # noqa: F821
    model = models.cifar_resnet(width=WIDTH)  # noqa: F821
    return speed.measure_throughput(model, loader, steps=SPEED_STEPS,  # noqa: F821
                                    device=device)["img_per_s"]  # noqa: F821


BATCH_SIZES = [16, 64, 128]
results = {bs: measure(bs) for bs in BATCH_SIZES}      # batch size -> images/s
best_batch_size = max(results, key=results.get)
