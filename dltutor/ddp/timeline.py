"""One DDP step on a timeline: where forward, backward and each bucket's all-reduce sit in time.

Seed 004 models an iteration as `T = Tforward + Tallreduce`; with backward and DDP's overlap
written out, one step takes

    T_iter = T_forward + T_backward + T_comm - T_overlap (+ the optimizer step and gaps)

where T_comm is the time any all-reduce runs and T_overlap the part of it that runs while backward
is still computing. The overlap fraction T_overlap / T_comm is 0 with `--no-overlap` (one all-reduce
after backward) and grows as buckets start earlier.

* `Recorder`: lab 02's `--profile-steps N`: records N steps with `torch.profiler` and saves the
  events a timeline needs to `<dir>/profile.rank<r>.json` (name, thread, start and end in us).
* `step_parts(events)`: per recorded step, the intervals of forward, backward and communication.
* `breakdown(parts)`: T_iter, T_forward, T_backward, T_comm, T_overlap and the overlap fraction.

What the profiler sees: on CPU/gloo, forward and backward are CPU op spans on the rank's main
thread (`DistributedDataParallel.forward`, `autograd::engine::evaluate_function: ...`), and each
bucket's all-reduce is a `gloo:all_reduce` span on one of gloo's own threads, so the two can run at
the same time. On GPU/nccl the all-reduce is a `nccl:all_reduce` launch on the CPU and an NCCL kernel
on its own CUDA stream; the CPU-side spans of backward are kernel launches, so there the timeline
is only approximate unless CUDA activity is recorded too (it is, when a GPU is present).
"""
from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

STEP = "dltutor.step"
FORWARD = "DistributedDataParallel.forward"
BACKWARD = "autograd::engine::evaluate_function:"
LAUNCH = "c10d::allreduce_"
COMM = re.compile(r"^(gloo|nccl):all_reduce$|^nccl(Dev)?Kernel_AllReduce")
KEEP = re.compile(r"^(dltutor\.step|DistributedDataParallel\.forward|Optimizer\.step|"
                  r"autograd::engine::evaluate_function:|c10d::allreduce_|gloo:all_reduce|"
                  r"nccl:all_reduce|nccl(Dev)?Kernel_AllReduce)")


# ---------------------------------------------------------------- recording (inside the lab)
class Recorder:
    """Profile `steps` training steps starting at step `first` (0-based) and save their events.

    In the loop: `with rec.step(k): <one training step>`; after it: `path = rec.save(rank)`.
    `steps=0` records nothing (`step` is then a no-op context).
    """

    def __init__(self, steps: int, first: int, out_dir):
        self.steps, self.first, self.out_dir = int(steps), max(int(first), 1), out_dir
        self.events, self._prof = [], None

    def active(self, k: int) -> bool:
        return self.steps > 0 and self.first <= k < self.first + self.steps

    @contextlib.contextmanager
    def step(self, k: int):
        if not self.active(k):
            yield
            return
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function
        if self._prof is None:
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            self._prof = profile(activities=acts)
            self._prof.__enter__()
        with record_function(STEP):
            yield
        if k == self.first + self.steps - 1:
            self._prof.__exit__(None, None, None)
            raw = self._prof.profiler.kineto_results.events()  # cheaper than prof.events()
            self.events = [{"name": e.name(), "thread": e.start_thread_id(),
                            "device": str(e.device_type()).split(".")[-1],
                            "start": e.start_ns() / 1e3, "end": e.end_ns() / 1e3}
                           for e in raw if KEEP.match(e.name())]

    def save(self, rank: int):
        """Write the events to `<out_dir>/profile.rank<rank>.json`; returns the path (None if idle)."""
        if not self.events or not self.out_dir:
            return None
        path = Path(self.out_dir) / f"profile.rank{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.events))
        return str(path)


def load(path) -> list[dict]:
    """The events a `Recorder` saved."""
    return json.loads(Path(path).read_text())


# ---------------------------------------------------------------- interval arithmetic
def union(intervals) -> list[tuple[float, float]]:
    """Sorted, merged intervals: overlapping or touching (start, end) pairs become one."""
    out = []
    for s, e in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def length(intervals) -> float:
    """Total time covered by `intervals` (overlaps counted once)."""
    return sum(e - s for s, e in union(intervals))


def subtract(a, b) -> list[tuple[float, float]]:
    """The parts of intervals `a` that no interval of `b` covers."""
    out = []
    for s, e in union(a):
        for s2, e2 in union(b):
            if e2 <= s or s2 >= e:
                continue
            if s2 > s:
                out.append((s, s2))
            s = max(s, e2)
        if e > s:
            out.append((s, e))
    return out


def overlap_length(a, b) -> float:
    """Time covered by both `a` and `b` (each a list of intervals)."""
    ua, ub, total = union(a), union(b), 0.0
    for s, e in ua:
        for s2, e2 in ub:
            total += max(0.0, min(e, e2) - max(s, s2))
    return total


# ---------------------------------------------------------------- one step's parts
def step_parts(events: list[dict]) -> list[dict]:
    """Per recorded step: its span, forward, backward (compute) and comm intervals (us).

    Forward is `DistributedDataParallel.forward` (else the step's start up to backward); backward is
    the union of the autograd engine's function spans on the step's thread, less the time that
    thread spends inside `c10d::allreduce_` (handing a bucket to the backend, which can block: that
    is communication, not backward); comm is every all-reduce span (`gloo:all_reduce`,
    `nccl:all_reduce` or an NCCL kernel) inside the step.
    """
    steps = sorted((e for e in events if e["name"] == STEP), key=lambda e: e["start"])
    out = []
    for st in steps:
        s0, s1 = st["start"], st["end"]
        inside = [e for e in events if e is not st and s0 <= e["start"] < s1]
        mine = [e for e in inside if e["thread"] == st["thread"]]
        bwd = subtract([(e["start"], e["end"]) for e in mine if e["name"].startswith(BACKWARD)],
                       [(e["start"], e["end"]) for e in mine if e["name"] == LAUNCH])
        fwd = [(e["start"], e["end"]) for e in inside if e["name"] == FORWARD]
        if not fwd:
            fwd = [(s0, min((b for b, _ in bwd), default=s0))]
        comm = [(e["start"], min(e["end"], s1)) for e in inside if COMM.match(e["name"])]
        out.append({"step": (s0, s1), "forward": fwd, "backward": bwd, "comm": comm})
    return out


def breakdown(parts: dict) -> dict:
    """The terms of the iteration-time model for one step (ms) and the overlap fraction."""
    ms = 1e-3
    t_iter = (parts["step"][1] - parts["step"][0]) * ms
    t_fwd, t_bwd = length(parts["forward"]) * ms, length(parts["backward"]) * ms
    t_comm = length(parts["comm"]) * ms
    t_ovl = overlap_length(parts["comm"], parts["backward"]) * ms
    return {"t_iter_ms": t_iter, "t_forward_ms": t_fwd, "t_backward_ms": t_bwd,
            "t_comm_ms": t_comm, "t_overlap_ms": t_ovl,
            "t_other_ms": t_iter - (t_fwd + t_bwd + t_comm - t_ovl),
            "overlap_fraction": t_ovl / t_comm if t_comm > 0 else 0.0,
            "buckets": len(parts["comm"])}


def run_rows(label: str, profile_files) -> list[dict]:
    """One row per (rank, recorded step) of a launch: `breakdown` plus the label, rank, step."""
    rows = []
    for rank, path in enumerate(profile_files):
        for k, parts in enumerate(step_parts(load(path))):
            rows.append({"label": label, "rank": rank, "step": k, **breakdown(parts)})
    return rows
