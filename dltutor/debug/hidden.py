"""How long each fault of notebook 08 stayed hidden, and the step tables its sections show.

`time_to_message` turns the notebook's broken runs (`dltutor.debug.runs.Outcome`s) into one row
per fault: seconds from the fault (the faulty rank's own clock) to the first message a rank raised
or the first step report whose check names it, that message, and what made it appear (the tool
or check switched on, or nothing). `caveats` says, from the same runs, what those seconds are not.
"""
from __future__ import annotations

import math
import re

from dltutor.debug import diagnose, faults

GLOO_PATH = re.compile(r"\[[^\]]*third_party/gloo/[^\]]*\]\s*")
MESSAGE_CHARS = 150


def short(message: str) -> str:
    """A message for the table: gloo's source path dropped, cut at a word with '…' if long."""
    text = GLOO_PATH.sub("", message)
    if len(text) <= MESSAGE_CHARS:
        return text
    return text[:MESSAGE_CHARS].rsplit(" ", 1)[0] + " …"


def timing_row(section: str, out, after_s, message: str, found_by: str) -> dict:
    """One row of the fault-to-message table; a fault of the code every rank runs has no
    faulty rank ('all')."""
    return {"section": section, "fault": out.fault,
            "fault_rank": "all" if out.fault in faults.ALL_RANKS else out.fault_rank,
            "first_message_s": after_s, "found_by": found_by, "message": short(message)}


def first_message(section: str, out, found_by: str) -> dict:
    """The earliest error any rank caught, and how long after the fault."""
    if not out.caught:
        return timing_row(section, out, None, "no rank raised anything", found_by)
    rank, (after, error) = min(out.caught.items(), key=lambda kv: kv[1][0])
    return timing_row(section, out, after, f"rank {rank}: {diagnose.first_line(error)}", found_by)


def detected(section: str, out, pred, describe, found_by: str) -> dict:
    """The first step report for which `pred` holds: seconds after the fault, and what it says."""
    rows = [s for s in out.steps() if pred(s)]
    if not rows or out.fault_t is None:
        return timing_row(section, out, None, "no check fired", found_by)
    first = min(rows, key=lambda s: s["t"])
    return timing_row(section, out, max(first["t"] - out.fault_t, 0.0), describe(first), found_by)


def _repeats_epoch(s) -> bool:
    return bool(s.get("same_ids_as_last_epoch"))


def _drifted(s) -> bool:
    return (s.get("update_error") or 0) > diagnose.TOLERANCE or diagnose.differ(s["buffer_sums"])


def _nonfinite(s) -> bool:
    return not math.isfinite(s["loss"])


CHECKS = "--checks step reports (switched on; else hidden)"


def time_to_message(*, hang, order, shape, dtype, no_set_epoch, drift: dict, slow, nan, killed,
                    slow_ms: float, group_timeout_s: float, bare=None, scaled=None) -> list[dict]:
    """One row per fault (section, fault, fault_rank, first_message_s, found_by, message);
    `bare`: the shape fault with no check (when it ran), `scaled`: the NaN run with loss scaling."""
    extra = ([first_message("2 shape, no check", bare, f"no tool: the group's timeout, "
                            f"{group_timeout_s:g} s here")] if bare is not None else [])
    scaled_row = ([detected("5 nan+loss scaling", scaled, _nonfinite,
                            lambda s: f"rank {s['rank']}: loss {s['loss']} at step {s['step']}",
                            "the step report's loss (every step, no check)")]
                  if scaled is not None else [])
    def slowed(s):   # the straggler's own report: compute well above its healthy few ms
        return s["rank"] == slow.fault_rank and s["compute_s"] > slow_ms / 2e3
    return [
        first_message("1 hang", hang, f"no tool: the group's timeout, {group_timeout_s:g} s here"),
        first_message("1 order+DETAIL", order, "TORCH_DISTRIBUTED_DEBUG=DETAIL (switched on)"),
        *extra,
        first_message("2 shape+check", shape, "--checks fingerprint (switched on)"),
        first_message("2 dtype+DETAIL", dtype, "TORCH_DISTRIBUTED_DEBUG=DETAIL (switched on)"),
        detected("2 set_epoch", no_set_epoch, _repeats_epoch,
                 lambda s: f"rank {s['rank']}: step {s['step']} repeats last epoch's batch", CHECKS),
        *[detected("3 drift", out, _drifted,
                   lambda s: f"rank {s['rank']}: checksums differ at step {s['step']}", CHECKS)
          for out in drift.values()],
        detected("4 straggler", slow, slowed,
                 lambda s: f"rank {s['rank']}: compute {1e3 * s['compute_s']:.0f} ms at step "
                           f"{s['step']}", CHECKS),
        detected("5 nan", nan, _nonfinite,
                 lambda s: f"rank {s['rank']}: loss {s['loss']} at step {s['step']}",
                 "the step report's loss (every step, no check)"),
        *scaled_row,
        first_message("6 kill (survivor)", killed, "no tool: the peer's next collective"),
        timing_row("6 kill (launcher)", killed, killed.ended_t - killed.fault_t,
                   diagnose.first_line(killed.failure), "no tool: the launcher"),
    ]


def caveats(timing, *, no_set_epoch, slow, healthy, drift: dict, group_timeout_s: float,
            load=None) -> list[str]:
    """What the seconds of `time_to_message` are not, from the same runs (`load`: the machine's
    load average when they ran)."""
    from dltutor.debug.straggler import load_words
    fast = [r for r in timing if r["first_message_s"] is not None and r["first_message_s"] < 0.1]
    lines = [f"One run each, no repeats and no spread: the {len(fast)} rows under 0.1 s "
             "differ by amounts one busy moment of the machine can change; do not rank them "
             f"({load_words(load)}).",
             f"The hang's seconds (the earliest rank's message) are the timeout this notebook "
             f"chose, {group_timeout_s:g} s; on gloo, with torch's default (30 min), it would "
             "have stayed hidden 30 min: an extrapolation, not run (NCCL's default is 10 min). "
             "Every row found by a tool or "
             "check was found because that was switched on; without it those faults stay hidden."]
    per_epoch = [s for s in no_set_epoch.steps() if s["rank"] == 0 and s["epoch"] == 0]
    lines.append(f"set_epoch: its check can fire only at the first step of the second epoch, "
                 f"so its time is about one epoch ({len(per_epoch)} steps), not a detection delay.")
    d = drift.get("bn_buffer")
    if d is not None:
        strikes = sorted({(m["rank"], m["step"]) for m in d.of("fault")})
        lines.append(f"bn_buffer is a fault of the code every rank runs: it struck at (rank, "
                     f"step) {strikes}, whatever FAULT_RANK and FAULT_STEP say.")
    first = [s for s in healthy.steps() if s["rank"] == slow.fault_rank]
    if first:
        later = [1e3 * s["compute_s"] for s in first[1:]]
        lines.append(f"straggler: found at its first slow step; in the healthy run rank "
                     f"{slow.fault_rank}'s step 0 computed {1e3 * first[0]['compute_s']:.0f} ms vs "
                     f"{sum(later) / max(len(later), 1):.1f} ms mean later (first-step warm-up), "
                     "which the straggler's step 0 includes too.")
    return lines


def checksum_rows(out, last_step: int) -> list[dict]:
    """Per step and rank up to `last_step`: both ranks' parameter checksums and the rank's update
    error (2 ranks)."""
    return [{"step": s["step"], "rank": s["rank"], "param_sum_r0": s["param_sums"][0],
             "param_sum_r1": s["param_sums"][1], "update_error": s["update_error"]}
            for s in out.steps() if s["step"] <= last_step]


def nonfinite_rows(outs: dict, around_step: int) -> list[dict]:
    """Loss, finiteness and loss scale per rank, the step before to the step after `around_step`,
    for each labelled run of `outs`; a non-finite loss is printed as the log holds it (nan, inf)."""
    keys = ("step", "rank", "loss", "grads_finite", "params_finite", "scale")
    def cell(k, v):
        return str(v) if k == "loss" and isinstance(v, float) and not math.isfinite(v) else v
    return [{"run": name, **{k: cell(k, s.get(k)) for k in keys}} for name, out in outs.items()
            for s in out.steps() if around_step - 1 <= s["step"] <= around_step + 1]
