"""How long each fault of notebook 08 stayed hidden, and the step tables its sections show.

`time_to_message` turns the notebook's broken runs (`dltutor.debug.runs.Outcome`s) into one row
per fault: seconds from the fault (the faulty rank's own clock) to the first message a rank raised
or the first step report whose check names it, and that message.
"""
from __future__ import annotations

import math

from dltutor.debug import diagnose
from dltutor.debug.findings import detected, first_message, timing_row


def _repeats_epoch(s) -> bool:
    return bool(s.get("same_ids_as_last_epoch"))


def _drifted(s) -> bool:
    return (s.get("update_error") or 0) > diagnose.TOLERANCE or diagnose.differ(s["buffer_sums"])


def _nonfinite(s) -> bool:
    return not math.isfinite(s["loss"])


def time_to_message(*, hang, order, shape, dtype, no_set_epoch, drift: dict, slow, nan, killed,
                    slow_ms: float) -> list[dict]:
    """One row per fault (section, fault, fault_rank, first_message_s, message)."""
    def slowed(s):   # the straggler's own report: compute well above its healthy few ms
        return s["rank"] == slow.fault_rank and s["compute_s"] > slow_ms / 2e3
    return [
        first_message("1 hang", hang), first_message("1 order+DETAIL", order),
        first_message("2 shape+check", shape), first_message("2 dtype+DETAIL", dtype),
        detected("2 set_epoch", no_set_epoch, _repeats_epoch,
                 lambda s: f"rank {s['rank']}: step {s['step']} repeats last epoch's batch"),
        *[detected("3 drift", out, _drifted,
                   lambda s: f"rank {s['rank']}: checksums differ at step {s['step']}")
          for out in drift.values()],
        detected("4 straggler", slow, slowed,
                 lambda s: f"rank {s['rank']}: compute {1e3 * s['compute_s']:.0f} ms at step {s['step']}"),
        detected("5 nan", nan, _nonfinite,
                 lambda s: f"rank {s['rank']}: loss {s['loss']} at step {s['step']}"),
        first_message("6 kill (survivor)", killed),
        timing_row("6 kill (launcher)", killed, killed.ended_t - killed.fault_t,
                   diagnose.first_line(killed.failure)),
    ]


def checksum_rows(out, last_step: int) -> list[dict]:
    """Per step and rank up to `last_step`: both ranks' parameter checksums and the rank's update
    error (2 ranks)."""
    return [{"step": s["step"], "rank": s["rank"], "param_sum_r0": s["param_sums"][0],
             "param_sum_r1": s["param_sums"][1], "update_error": s["update_error"]}
            for s in out.steps() if s["step"] <= last_step]


def nonfinite_rows(outs: dict, around_step: int) -> list[dict]:
    """Loss, finiteness and loss scale per rank, the step before to the step after `around_step`,
    for each labelled run of `outs`."""
    keys = ("step", "rank", "loss", "grads_finite", "params_finite", "scale")
    return [{"run": name, **{k: s.get(k) for k in keys}} for name, out in outs.items()
            for s in out.steps() if around_step - 1 <= s["step"] <= around_step + 1]
