"""Notebook 02's Exercise 1, checked in the kernel: effective batch, scaled LR, warm-up steps.

    check_scaling_exercise(effective_batch_answer, scaled_lr_answer, warmup_steps_answer)

The job: NODES x GPUS ranks (one per GPU), a per-rank batch of PER_RANK, an LR of BASE_LR tuned
for BASE_BATCH images per step, WARMUP_EPOCHS epochs of warm-up over IMAGES images (steps per
epoch: images // global batch). It prints one plain line per wrong answer, naming what is wrong
(a common slip by name: one rank's batch, the inverse ratio, one epoch ...) but never the right
value nor the formula that gives it, and returns True when all three are right. Numbers are
numbers (`dltutor.grading.numbers`): numpy scalars count; the batch and the step count are whole
numbers, so a float there (what `/` gives) is refused with a message that says so.
"""
from __future__ import annotations

import math

from dltutor.ddp.scaling import effective_batch, scaled_lr
from dltutor.grading.numbers import as_float, as_int, kind

NODES, GPUS, PER_RANK = 4, 4, 64
BASE_LR, BASE_BATCH = 0.1, 256
WARMUP_EPOCHS, IMAGES = 5, 1_281_167


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def _batch_problem(eb) -> str | None:
    """What is wrong with the effective batch `eb`, or None."""
    n = as_int(eb)
    if n is None:
        what = ("a batch is a whole number of images: give an int, not a float (// not /)"
                if as_float(eb) is not None else "not a number of images")
        return f"effective batch: {kind(eb)}: {what}"
    if n == effective_batch(PER_RANK, NODES * GPUS):
        return None
    if n == PER_RANK:
        return ("effective batch: that is one rank's batch; the effective batch is what one "
                "optimizer step sees, from every rank of the job")
    if n in (PER_RANK * NODES, PER_RANK * GPUS):
        return ("effective batch: count every rank of the job, on every node (one rank per GPU), "
                "not the ranks of one node nor one per node")
    return "effective batch: not the number of images one optimizer step sees over all ranks"


def _lr_problem(lr, eb) -> str | None:
    """What is wrong with the scaled learning rate `lr`, or None (`eb`: the student's batch)."""
    x = as_float(lr)
    if x is None:
        return f"scaled LR: {kind(lr)}: not a number (give the learning rate as a float)"
    batch = effective_batch(PER_RANK, NODES * GPUS)
    if _close(x, scaled_lr(BASE_LR, global_batch=batch, base_batch=BASE_BATCH)):
        return None
    mine = as_int(eb)
    if mine and _close(x, scaled_lr(BASE_LR, global_batch=mine, base_batch=BASE_BATCH)):
        return "scaled LR: the rule is applied right, but to a wrong effective batch (see above)"
    if _close(x, BASE_LR):
        return ("scaled LR: that is the base LR, unscaled; the linear rule scales it with the "
                "batch it was tuned for")
    if _close(x, BASE_LR * BASE_BATCH / batch):
        return "scaled LR: the ratio is upside down (a bigger batch takes a bigger LR)"
    if _close(x, BASE_LR * math.sqrt(batch / BASE_BATCH)):
        return "scaled LR: that is the square-root rule; the exercise asks for the linear rule"
    if _close(x, BASE_LR * NODES * GPUS):
        return (f"scaled LR: scaled by the number of ranks, but the base LR was tuned for "
                f"{BASE_BATCH} images per step, not for one rank's {PER_RANK}")
    return "scaled LR: not the base LR scaled by the linear rule for this job's batch"


def _steps_problem(ws, eb) -> str | None:
    """What is wrong with the warm-up step count `ws`, or None (`eb`: the student's batch)."""
    n = as_int(ws)
    if n is None:
        what = ("a step count is a whole number: give an int, not a float (steps per epoch "
                "are images // global batch)" if as_float(ws) is not None else "not a step count")
        return f"warm-up steps: {kind(ws)}: {what}"
    batch = effective_batch(PER_RANK, NODES * GPUS)
    if n == WARMUP_EPOCHS * (IMAGES // batch):
        return None
    mine = as_int(eb)
    if mine and mine > 0 and n == WARMUP_EPOCHS * (IMAGES // mine):
        return "warm-up steps: counted right, but from a wrong effective batch (see above)"
    if n == IMAGES // batch or n in (math.ceil(IMAGES / batch), round(IMAGES / batch)):
        return f"warm-up steps: that is one epoch's steps; the warm-up lasts {WARMUP_EPOCHS} epochs"
    if n in (math.ceil(WARMUP_EPOCHS * IMAGES / batch), round(WARMUP_EPOCHS * IMAGES / batch),
             WARMUP_EPOCHS * math.ceil(IMAGES / batch), int(WARMUP_EPOCHS * IMAGES / batch)):
        return ("warm-up steps: close, but rounded at the wrong place: steps per epoch are "
                "images // global batch (the last partial batch is dropped), counted per epoch")
    if n in (WARMUP_EPOCHS * IMAGES, WARMUP_EPOCHS * (IMAGES // PER_RANK)):
        return "warm-up steps: one step takes a whole global batch, from every rank"
    return "warm-up steps: not the number of optimizer steps in the warm-up epochs"


def check_scaling_exercise(eb, lr, ws) -> bool:
    """Exercise 1's check: print one verdict line per wrong answer (never the answer); True when
    the effective batch `eb`, the scaled LR `lr` and the warm-up steps `ws` are all right."""
    if eb is None or lr is None or ws is None:
        print("Not answered yet: fill in the three values above, then run this cell again.")
        return False
    problems = [p for p in (_batch_problem(eb), _lr_problem(lr, eb), _steps_problem(ws, eb)) if p]
    if problems:
        print("\n".join(f"Not yet: {p}." for p in problems))
        return False
    print("All three are right.")
    return True
