"""Stop cleanly when warned: a signal sets a flag, every rank agrees on the step, saves, exits 75.

A batch system warns a job before it ends it: Slurm sends the signal asked for with
`--signal=B:USR1@SECONDS` before the time limit (to the batch shell, which forwards it), and
SIGTERM at the limit or on `scancel` (then SIGKILL KillWait seconds later). `StopOnSignal` turns
either into a flag; `agreed(step)` all-reduces it (MAX) after each step, so every rank stops after
the SAME step even when the signal reached only some ranks (a shell that forwarded it to one task,
a rank that handled it a moment later). The caller then saves that step's checkpoint and exits
with STOPPED_ON_SIGNAL (75, sysexits' EX_TEMPFAIL: "try again later"), which the batch shell reads
as "the checkpoint is saved: requeue me".

    stop = StopOnSignal()                  # SIGUSR1 and SIGTERM; handlers restored by close()
    ...after each optimizer step:
    if stop.agreed():                      # one collective per step (every rank calls it)
        save(); report(**stop.metrics(step)); return STOPPED_ON_SIGNAL
"""
from __future__ import annotations

import os
import signal

import torch

STOPPED_ON_SIGNAL = 75          # exit status: stopped on a signal, its step saved (EX_TEMPFAIL)
SIGNALS = ("SIGUSR1", "SIGTERM")


def slurm_restart_count() -> int:
    """How often Slurm requeued this job (SLURM_RESTART_COUNT; 0 on the first run or outside Slurm)."""
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0)


class StopOnSignal:
    """Handlers for `names` that record the first signal; `agreed()` makes it every rank's."""

    def __init__(self, names=SIGNALS):
        self.received: str | None = None
        self.stop: str | None = None       # the signal every rank agreed to stop on
        self._old = {}
        for name in names:
            sig = getattr(signal, name)
            self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signal.Signals(signum).name

    def agreed(self, device=None) -> bool:
        """True on every rank once any rank has received a signal (an all-reduce MAX of a flag;
        each rank must call it after the same step). Without a process group: this rank's flag."""
        import torch.distributed as tdist
        code = SIGNALS.index(self.received) + 1 if self.received in SIGNALS else (1 if self.received else 0)
        flag = torch.tensor([code], dtype=torch.int32, device=device)
        if tdist.is_available() and tdist.is_initialized():
            tdist.all_reduce(flag, op=tdist.ReduceOp.MAX)  # DDP: the same answer on every rank
        if flag.item() and self.stop is None:
            self.stop = SIGNALS[flag.item() - 1]
        return self.stop is not None

    def metrics(self, step: int | None) -> dict:
        """For the metrics line: the signal stopped on (None: ran to the end) and this rank's own."""
        return {"stop_signal": self.stop, "signal_received": self.received,
                "signal_stop_step": step if self.stop else None,
                "slurm_restart_count": slurm_restart_count()}

    def close(self):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
