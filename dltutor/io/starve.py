"""When the device starves: the same training step fed by a pipeline, timed in two parts.

Each step is split into the *data wait* (blocked in `next(loader)`: reading, decoding, collating
what the workers have not prepared yet) and the *compute* (`train_step` on the device, synchronized).
A model whose compute is shorter than the pipeline's time per batch waits: it is I/O-bound, like
seed 000's UNet3D on GPFS; a model whose compute is longer hides the pipeline: compute-bound, like
its BERT. The same pipeline can starve one model and feed another.
"""
from __future__ import annotations

import math
import time

from dltutor.core import device as _device
from dltutor.core.train_step import train_step

STARVED = 0.5  # data wait above this share of the step time: the device waits more than it works


def light_model():
    """A linear classifier: microseconds of compute per sample (starves on almost any pipeline)."""
    import torch.nn as nn
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10))


def heavy_model(width: int = 32):
    """A small CNN: orders of magnitude more compute per sample than `light_model`."""
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(2 * width * 7 * 7, 10))


def mlp_model(hidden: int = 256):
    """A two-hidden-layer MLP: between the two (the exercise's model)."""
    import torch.nn as nn
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, hidden), nn.ReLU(),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))


MODELS = {"light": light_model, "heavy": heavy_model, "mlp": mlp_model}


def timeline(batches, model, steps: int, dev=None, lr: float = 0.01,
             threads: int | None = None) -> list[dict]:
    """Train `model` for up to `steps` steps on `batches` (yielding (uint8 images, labels, ids));
    one row per step: start (s since the loader was asked for its first batch), wait_s, compute_s.
    `threads`: torch's intra-op threads for the run (restored after). On a small shared CPU, more
    than one thread can cost more in synchronisation than a tiny model computes."""
    import torch
    saved = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _timeline(batches, model, steps, dev or _device.device(), lr)
    finally:
        torch.set_num_threads(saved)


def _timeline(batches, model, steps, dev, lr):
    import torch
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    rows, it = [], iter(batches)
    origin = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        try:
            x, y, _ = next(it)
        except StopIteration:
            break
        t1 = time.perf_counter()
        x = x.to(dev, non_blocking=True).float().div_(255)
        train_step(model, opt, x, y.to(dev))
        _device.synchronize(dev)
        t2 = time.perf_counter()
        rows.append(dict(step=step, start=t0 - origin, wait_s=t1 - t0, compute_s=t2 - t1))
    del it
    return rows


def wait_share(rows, skip_first: bool = True) -> float:
    """Share of step time spent waiting for data. The first step is left out by default: its wait
    is the time-to-first-batch (worker start-up), paid once, not the steady state."""
    rows = _steady(rows, skip_first)
    wait = sum(r["wait_s"] for r in rows)
    total = wait + sum(r["compute_s"] for r in rows)
    return wait / total if total else 0.0


def share_spread(rows, skip_first: bool = True) -> float:
    """95 % confidence interval (half-width) of the wait share, from the per-step shares (step 0
    left out; `dltutor.core.spread.mean_ci`, nan below two steps)."""
    from dltutor.core.spread import mean_ci
    rows = _steady(rows, skip_first)
    return mean_ci([r["wait_s"] / (r["wait_s"] + r["compute_s"]) for r in rows
                        if r["wait_s"] + r["compute_s"] > 0])


def _steady(rows, skip_first: bool):
    """The steps after each loader's first batch: step 0 of the run, and of every later piece of
    it (`bench.timelines` with rounds > 1), is a time to the first batch, not the steady state."""
    if not skip_first or len(rows) < 2:
        return rows
    return [r for k, r in enumerate(rows) if k and r.get("step") != 0] or rows[1:]


def wait_ms(rows, skip_first: bool = True, key: str = "wait_s") -> float:
    """Mean data wait per step (ms), step 0 (the time to the first batch) left out by default."""
    rows = _steady(rows, skip_first)
    return 1e3 * sum(r[key] for r in rows) / len(rows) if rows else 0.0


def wait_ms_spread(rows, skip_first: bool = True, key: str = "wait_s") -> float:
    """95 % confidence interval (half-width) of `wait_ms`, from the per-step waits (step 0 left
    out; nan below two steps)."""
    from dltutor.core.spread import mean_ci
    return mean_ci([1e3 * r[key] for r in _steady(rows, skip_first)])


def compute_ms(rows, skip_first: bool = True) -> float:
    """Mean compute per step (ms), step 0 left out as in `wait_ms`."""
    return wait_ms(rows, skip_first, key="compute_s")


def compute_ms_spread(rows, skip_first: bool = True) -> float:
    return wait_ms_spread(rows, skip_first, key="compute_s")


def verdict(rows) -> str:
    """starved / fed when the wait share's 95 % interval lies on one side of the 50 % line;
    otherwise the interval straddles it: inconclusive."""
    share, spread = wait_share(rows), share_spread(rows)
    if math.isnan(spread) or abs(share - STARVED) <= spread:
        return "on the line (inconclusive)"
    return "starved (I/O-bound)" if share > STARVED else "fed (compute-bound)"


def summary(timelines: dict) -> list[dict]:
    """One row per (name -> rows): steps, mean wait and compute (ms), wait share (± in percentage
    points), verdict, and the files' cache state before the run where it was measured."""
    from dltutor.io.measure import cache_state
    out = []
    for name, rows in timelines.items():
        steady = _steady(rows, True)
        found = [r["resident_before"] for r in rows if "resident_before" in r]
        out.append(dict(run=name, steps=len(rows),
                        wait_ms=1e3 * sum(r["wait_s"] for r in steady) / len(steady),
                        compute_ms=1e3 * sum(r["compute_s"] for r in steady) / len(steady),
                        first_wait_ms=1e3 * rows[0]["wait_s"],
                        wait_share=wait_share(rows), share_spread=share_spread(rows),
                        share_pp=f"{100 * wait_share(rows):.1f} ± {100 * share_spread(rows):.1f} pp",
                        cache=cache_state(min(found)) if found else "n/a",
                        verdict=verdict(rows)))
    return out


def check_starved(answer, timelines: dict, band: float = 0.1) -> bool:
    """The exercise's check: `answer` (a set of run names you predict are starved; one name alone
    counts as a set of one, `{}` as the empty set) against what was measured. A run within `band`
    of the 50% line may go either way: it is not held against you."""
    if answer is None:
        print("Not answered yet: set ANSWER to the set of run names you predict are starved.")
        return False
    if isinstance(answer, str):          # one run name: a set of one, not of its characters
        answer = {answer}
    if not isinstance(answer, (set, frozenset, list, tuple, dict)):
        print(f"ANSWER is {type(answer).__name__} {answer!r}: set it to a set of run names, "
              'e.g. {"mlp + files/w0"}')
        return False
    answer = set(answer)
    unknown = answer - set(timelines)
    if unknown:
        print(f"Unknown run name(s) {sorted(unknown, key=repr)}: choose from {sorted(timelines)}")
        return False
    ok = True
    for name, rows in timelines.items():
        share = wait_share(rows)
        measured = share > STARVED
        close = abs(share - STARVED) <= band
        right = (name in answer) == measured or close
        ok &= right
        print(f"{'ok   ' if right else 'WRONG'} {name:28s} waits {share:5.1%} of the step -> "
              f"{'starved' if measured else 'fed'}{' (close to the line: either counts)' if close else ''}"
              f"; you said {'starved' if name in answer else 'fed'}")
    print("All right." if ok else "Not yet: compare each run's wait with its compute above.")
    return ok
