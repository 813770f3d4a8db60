"""Pipeline parallelism with torch.distributed.pipelining, timed, and its bubble.

The model is a stack of residual MLP blocks cut into p equal stages, one per rank. A step splits
the batch into m micro-batches; a schedule (GPipe: all forwards, then all backwards; 1F1B: one
forward, one backward, in steady state) decides which stage works on which micro-batch when.
While the pipeline fills and drains, stages wait: with equal stages the idle share of a step,
the *bubble*, is (p-1)/(m+p-1) for both schedules. 1F1B keeps at most p micro-batches' activations
in flight instead of m.

`TimedStage` is torch's PipelineStage that records when each forward and backward of each
micro-batch starts and ends; `measured_bubble` turns those records into the idle fraction.
"""
from __future__ import annotations

import time

import torch
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from dltutor.core.device import synchronize
from dltutor.model_parallel.tensor import MLP

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Residual(nn.Module):
    """x + MLP(x): one block of the stack."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.mlp = MLP(d_model, hidden)

    def forward(self, x):
        return x + self.mlp(x)


class _Sleep(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward_s: float, backward_s: float):
        ctx.backward_s = backward_s
        time.sleep(forward_s)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.backward_s)
        return grad, None, None


class SleepWork(nn.Module):
    """A STAND-IN for a stage's compute: waits `forward_ms` in forward and twice that in backward
    and changes nothing. Waiting needs no CPU, so on a crowded machine (or like a GPU kernel the
    CPU only waits for) the schedule's own shape shows, not the fight for cores."""

    def __init__(self, forward_ms: float):
        super().__init__()
        self.forward_s = forward_ms / 1e3

    def forward(self, x):
        return _Sleep.apply(x, self.forward_s, 2 * self.forward_s)


def build_model(d_model: int, hidden: int, blocks: int) -> nn.Sequential:
    return nn.Sequential(*(Residual(d_model, hidden) for _ in range(blocks)))


def stage_slice(blocks: int, stages: int, stage: int) -> slice:
    """The blocks stage `stage` holds (equal cuts; `blocks` must divide evenly)."""
    if blocks % stages:
        raise ValueError(f"{blocks} blocks do not cut into {stages} equal stages")
    n = blocks // stages
    return slice(stage * n, (stage + 1) * n)


def bubble_formula(p: int, m: int) -> float:
    """Idle fraction of a GPipe / 1F1B step with p equal stages and m micro-batches."""
    if p < 1 or m < 1:
        raise ValueError(f"need p >= 1 and m >= 1, got p={p}, m={m}")
    return (p - 1) / (m + p - 1)


class TimedStage(PipelineStage):
    """A PipelineStage that appends (kind, micro_batch, start_s, end_s) to `self.events` for
    every forward ('F') and backward ('B'), relative to `self.t0` (set with `start_clock`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events, self.t0 = [], time.perf_counter()

    def start_clock(self) -> None:
        self.events, self.t0 = [], time.perf_counter()

    def _timed(self, kind, chunk, fn, *args, **kwargs):
        synchronize(self.device)
        start = time.perf_counter() - self.t0
        out = fn(*args, **kwargs)
        synchronize(self.device)
        self.events.append((kind, int(chunk), start, time.perf_counter() - self.t0))
        return out

    def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
        return self._timed("F", fwd_chunk_id, super().forward_one_chunk, fwd_chunk_id, *args, **kwargs)

    def backward_one_chunk(self, bwd_chunk_id, *args, **kwargs):
        return self._timed("B", bwd_chunk_id, super().backward_one_chunk, bwd_chunk_id, *args, **kwargs)


def make_schedule(name: str, stage, m: int, loss_fn):
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose one of {sorted(SCHEDULES)}")
    return SCHEDULES[name](stage, n_microbatches=m, loss_fn=loss_fn)


def run_step(schedule, stage, x, target, is_first: bool, is_last: bool):
    """One pipeline step; returns the micro-batch losses on the last stage, else []."""
    losses = []
    if is_first and is_last:
        schedule.step(x, target=target, losses=losses)
    elif is_first:
        schedule.step(x)
    elif is_last:
        schedule.step(target=target, losses=losses)
    else:
        schedule.step()
    return [float(v.detach()) for v in losses]


# ---------------------------------------------------------------- reading the records
def step_span(events_by_stage) -> tuple[float, float]:
    """(first start, last end) over every stage's events of one step."""
    starts = [e[2] for ev in events_by_stage for e in ev]
    ends = [e[3] for ev in events_by_stage for e in ev]
    return min(starts), max(ends)


def busy_seconds(events) -> float:
    return sum(end - start for _, _, start, end in events)


def measured_bubble(events_by_stage) -> float:
    """1 - (mean busy time of a stage) / (step span): the idle share of the step."""
    start, end = step_span(events_by_stage)
    busy = sum(busy_seconds(ev) for ev in events_by_stage) / len(events_by_stage)
    return 1.0 - busy / (end - start)


def busy_shares(events_by_stage) -> tuple[float, float]:
    """(share of the step when two or more stages computed at once, share when none did). With
    stages that strictly take turns the first is 0; the second is time no schedule formula counts:
    sends, the schedule's own work, waiting for a core."""
    start, end = step_span(events_by_stage)
    marks = sorted({t for ev in events_by_stage for e in ev for t in e[2:]})
    both = none = 0.0
    for a, b in zip(marks, marks[1:]):
        mid = (a + b) / 2
        busy = sum(any(e[2] <= mid < e[3] for e in ev) for ev in events_by_stage)
        both += (b - a) if busy >= 2 else 0.0
        none += (b - a) if busy == 0 else 0.0
    span = end - start
    return (both / span, none / span) if span > 0 else (0.0, 0.0)


def max_in_flight(events) -> int:
    """Most micro-batches whose forward has run on this stage but whose backward has not: how
    many micro-batches' activations the stage holds at once."""
    held = peak = 0
    for kind, _, _, _ in sorted(events, key=lambda e: e[2]):
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def mean_times(events_by_stage) -> dict:
    """Mean forward and backward time of one micro-batch on one stage (s)."""
    out = {}
    for kind in "FB":
        ts = [e[3] - e[2] for ev in events_by_stage for e in ev if e[0] == kind]
        out[kind] = sum(ts) / len(ts) if ts else float("nan")
    return out


def grad_error(stage_module, reference_blocks) -> float:
    """Largest |difference| between a stage's gradients and the same blocks' in the whole model."""
    errs = [(p.grad - q.grad).abs().max().item()
            for p, q in zip(stage_module.parameters(), reference_blocks.parameters())]
    return max(errs)


def reference_step(model, x, target, loss_fn) -> float:
    """Forward and backward of the whole model on the whole batch, on one process."""
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), target)
    loss.backward()
    return float(loss.detach())


def mse(out, target):
    return torch.nn.functional.mse_loss(out.float(), target.float())
