"""Time several training set-ups in turns, so that a slow stretch of a shared machine hits them all.

    runners = [Runner("a", model_a, loader_a, "cpu"), Runner("b", model_b, loader_b, "cpu")]
    for r in runners:
        r.warm_up(2)                           # every set-up built and warmed up before any timing
    order = time_in_rounds(runners, steps=30)  # [["a", "b"], ["b", "a"], ...]: who ran when
    runners[0].result()                        # {"img_per_s", "spread", "rounds", ...}

The timed steps of every runner are cut into the same pieces (at most `chunks`, CHUNKS unless
told). Round r times one piece of every runner, the order rotated by r (A B C, then B C A, then
C A B, ...), so a runner is neither always first nor always right after the same other one. A runner's img/s is its images
over its pieces' seconds; its ± is the 95 % CI of the mean of its pieces' rates
(`core.spread.mean_ci`). Timed one after the other, set-ups minutes apart meet different machines
(another program starts, the clock drops) and that drift shows up as a difference between them;
timed in turns, a slow minute slows every set-up alike and widens each one's ±.

A DataLoader with worker processes gets fresh workers for each of its pieces, started outside the
timed window, and the first `num_workers` batches of each piece are trained untimed (the workers
made them while no step ran); the workers are shut down after the piece. Workers kept alive between
pieces would prepare batches while the other set-ups are timed, competing with them for the cores,
and hand a queue of ready batches to their own next piece, which would then look faster than it is.
"""
from __future__ import annotations

import time

import torch

from dltutor.core import spread as ci
from dltutor.core.device import autocast, synchronize, to_device
from dltutor.core.train_step import train_step
from dltutor.single.train import default_optimizer

CHUNKS = 5   # the timed steps of each set-up in up to 5 pieces: the 95 % CI of their mean img/s is the ±


def pieces(steps: int, chunks: int = CHUNKS) -> list[int]:
    """Steps per piece: `steps` cut into at most `chunks` pieces of ceil(steps / chunks) (the last may be shorter)."""
    per = max(1, -(-steps // max(1, chunks)))
    return [min(per, steps - i) for i in range(0, steps, per)]


class Runner:
    """One set-up: a model (moved to `device`, channels_last if asked), its optimizer and its batches.

    `batches` is any iterable of (x, y), re-iterated when it runs out."""

    def __init__(self, name, model, batches, device, *, optimizer=None, channels_last=False, amp=False):
        self.name, self.device = name, torch.device(device)
        model.to(self.device).train()
        if channels_last:
            model.to(memory_format=torch.channels_last)
        self.model, self.batches, self.optimizer = model, batches, optimizer or default_optimizer(model)
        self.channels_last, self.amp = channels_last, amp
        self.workers = getattr(batches, "num_workers", 0) or 0   # a DataLoader's worker processes
        self._it = None
        self.rates, self.rounds, self.steps_timed, self.images, self.seconds = [], [], [], 0, 0.0
        self.error = None

    def _next(self):
        if self._it is None:
            self._it = iter(self.batches)
        try:
            return next(self._it)
        except StopIteration:   # the loader ran out: a new pass (with workers, fresh ones, inside the piece)
            self.close()
            self._it = iter(self.batches)
            return next(self._it)

    def step(self) -> int:
        """One training step; returns its images."""
        x, y = self._next()
        x, y = to_device(x, self.device, self.channels_last), y.to(self.device, non_blocking=True)
        train_step(self.model, self.optimizer, x, y, autocast=lambda: autocast(self.device, self.amp))
        return y.shape[0]

    def open(self) -> bool:
        """Ready for a piece; True when something untimed ran (fresh workers and their first batches)."""
        if not self.workers:
            return False
        self.close()
        for _ in range(self.workers):
            self.step()
        return True

    def close(self) -> bool:
        """With worker processes: shut them down (the next piece starts fresh ones) and return True.
        Without: keep the pass going (the next piece takes the next batches) and return False."""
        if not self.workers:
            return False
        it, self._it = self._it, None
        shutdown = getattr(it, "_shutdown_workers", None)   # torch's multi-process loader iterator
        if shutdown is not None:
            shutdown()
        return True

    def warm_up(self, steps: int) -> None:
        """Untimed steps (kernel selection, caches, torch.compile's compiling), then synchronize."""
        if steps > 0:
            self.open()
            for _ in range(steps):
                self.step()
            synchronize(self.device)
            self.close()

    def result(self) -> dict:
        """{img_per_s, images, seconds, steps, spread, rounds, pieces}: spread is the 95 % CI of the
        mean rate of its pieces (nan for one piece); rounds, the round each piece was timed in."""
        return {"img_per_s": self.images / self.seconds, "images": self.images, "seconds": self.seconds,
                "steps": sum(self.steps_timed), "spread": ci.mean_ci(self.rates), "rounds": list(self.rounds),
                "pieces": len(self.rates)}


def _piece(run: Runner, size: int, r: int, last):
    """Time `size` steps of `run` in round `r`; `last` is the clock's reading just before, when nothing
    untimed ran since (then it starts the piece). Returns the reading that ends it, or None."""
    try:
        untimed = run.open()
        synchronize(run.device)
        start = time.perf_counter() if untimed or last is None else last
        images = sum(run.step() for _ in range(size))
        synchronize(run.device)
        end = time.perf_counter()
    except Exception as exc:   # reported by the caller (its status row), never hidden
        run.error = exc
        run.close()
        return None
    run.rates.append(images / (end - start))
    run.rounds.append(r)
    run.images, run.seconds = run.images + images, run.seconds + (end - start)
    run.steps_timed.append(size)
    return None if run.close() else end


def time_in_rounds(runners: list[Runner], steps: int, chunks: int = CHUNKS) -> list[list[str]]:
    """Time `steps` steps of every runner in rounds of one piece each (at most `chunks` pieces: more
    pieces, a narrower interval of the mean), the order rotated each round;
    returns the order of every round (names). A runner that raises is left out of later rounds, its
    exception in `runner.error`; worker processes are shut down at the end."""
    order, last = [], None
    if not runners:
        return order
    try:
        for r, size in enumerate(pieces(steps, chunks)):
            k = r % len(runners)
            turn = runners[k:] + runners[:k]
            order.append([run.name for run in turn])
            for run in turn:
                if run.error is None:
                    last = _piece(run, size, r, last)
    finally:
        for run in runners:
            run.close()
    return order
