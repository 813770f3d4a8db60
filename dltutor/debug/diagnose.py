"""From what the ranks reported (and the messages they got): which rank, which step, which cause.

Each function takes an `Outcome` of `dltutor.debug.runs.run_fault` (or its step rows) and returns a
small dict the notebook prints and the tests assert on; none of them is told the injected fault.
"""
from __future__ import annotations

import math
import re

TIMEOUT = re.compile(r"Timed out waiting (\d+)ms")
FINGERPRINT = re.compile(
    r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+),?\s*"
    r"OpType=(\w+)(?:, TensorShape=\[([^\]]*)\])?(?:, TensorDtypes=(\w+))?.*?"
    r"but Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+),?\s*"
    r"OpType=(\w+)(?:, TensorShape=\[([^\]]*)\])?(?:, TensorDtypes=(\w+))?", re.S)
CLOSING = re.compile(r"^[IWE](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) .*closing signal SIGTERM", re.M)
GRACE = re.compile(r"stopping the other ranks in ([\d.]+) s")   # the course launcher's line
TOLERANCE = 1e-5        # |update - (-lr x synced gradient)|: float32 rounding stays far below


def first_line(text: str) -> str:
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def detail_mismatch(text: str) -> dict | None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL's message, parsed: the two ranks' sequence numbers, ops,
    shapes and dtypes."""
    m = FINGERPRINT.search(text)
    if not m:
        return None
    g = m.groups()
    side = lambda r, s, op, shape, dt: {"rank": int(r), "seq": int(s), "op": op,  # noqa: E731
                                        "shape": shape, "dtype": dt}
    return {"a": side(*g[:5]), "b": side(*g[5:])}


def hang(out) -> dict:
    """The first message each rank got, how long after the fault, and what it names."""
    rows = []
    for rank, (after, error) in sorted(out.caught.items()):
        t = TIMEOUT.search(error)
        rows.append({"rank": rank, "after_s": after, "timeout_ms": int(t.group(1)) if t else None,
                     "mismatch": detail_mismatch(error), "message": first_line(error)[:160]})
    return {"rows": rows, "fault_rank": out.fault_rank}


def differ(values, rel: float = 1e-9) -> bool:
    return any(abs(v - values[0]) > rel * max(1.0, abs(values[0])) for v in values)


def divergence(steps: list[dict]) -> dict:
    """The first step whose parameter (or buffer) checksums differ across ranks, and the ranks
    whose update was not the synchronised one (update_error above TOLERANCE)."""
    first = {}
    for s in steps:
        for what in ("param_sums", "buffer_sums"):
            if what not in first and s.get(what) and differ(s[what]):
                first[what] = s["step"]
    odd = sorted({s["rank"] for s in steps if (s.get("update_error") or 0) > TOLERANCE})
    first_odd = min((s["step"] for s in steps if (s.get("update_error") or 0) > TOLERANCE),
                    default=None)
    what = ("parameter" if "param_sums" in first else "buffer" if "buffer_sums" in first
            else None)
    return {"what": what, "step": first.get("param_sums", first.get("buffer_sums")),
            "ranks": odd, "update_step": first_odd}


def same_order(steps: list[dict]) -> dict:
    """Epochs whose batches repeat the previous epoch's, per rank (a forgotten set_epoch)."""
    epochs = sorted({s["epoch"] for s in steps if s.get("same_ids_as_last_epoch")})
    ranks = sorted({s["rank"] for s in steps if s.get("same_ids_as_last_epoch")})
    n_epochs = len({s["epoch"] for s in steps})
    return {"epochs": epochs, "ranks": ranks, "of_epochs": n_epochs}


def straggler(steps: list[dict], skip_first: int = 1) -> dict:
    """Per rank: mean step, compute (forward + what slowed it), backward (which holds the wait
    for the others in DDP's all-reduce) and the rest of the step, each with its median and the
    range (lowest, highest) over the steps (the first `skip_first`, warm-up, left out), and the
    steps' 95 % interval of the mean (`_ci`: it treats the steps of one run as independent, which
    a drifting run's are not); the slow rank computes longest."""
    from statistics import median

    from dltutor.core.spread import mean_ci
    ranks = sorted({s["rank"] for s in steps})
    rows = []
    for r in ranks:
        mine = [s for s in steps if s["rank"] == r][skip_first:]
        row = {"rank": r, "steps": len(mine)}
        for key in ("step", "compute", "backward"):
            ms = [1e3 * s[f"{key}_s"] for s in mine]
            row[f"{key}_ms"] = sum(ms) / max(len(ms), 1)
            row[f"{key}_ci"] = mean_ci(ms)
            row[f"{key}_med"] = median(ms) if ms else float("nan")
            row[f"{key}_lo"], row[f"{key}_hi"] = (min(ms), max(ms)) if ms else (0.0, 0.0)
        row["rest_ms"] = row["step_ms"] - row["compute_ms"] - row["backward_ms"]
        rows.append(row)
    slow = max(rows, key=lambda x: x["compute_ms"]) if rows else None
    others = [x for x in rows if slow and x["rank"] != slow["rank"]]
    return {"rows": rows, "slow_rank": slow["rank"] if slow else None, "skipped": skip_first,
            "others_wait_ms": (sum(x["backward_ms"] for x in others) / len(others) -
                               slow["backward_ms"]) if others else 0.0}


def skipped_step(steps: list[dict], step: int) -> dict:
    """Whether `step` left every rank's parameters exactly as the step before left them (each
    rank's own checksum `own_param_sum`, reported after every update): a skipped update."""
    sums = {(s["rank"], s["step"]): s.get("own_param_sum") for s in steps}
    ranks = sorted({s["rank"] for s in steps})
    pairs = {r: (sums.get((r, step - 1)), sums.get((r, step))) for r in ranks}
    known = {r: p for r, p in pairs.items() if None not in p}
    return {"known": bool(known) and len(known) == len(ranks),
            "unchanged": sorted(r for r, (a, b) in known.items() if a == b),
            "changed": sorted(r for r, (a, b) in known.items() if a != b), "sums": known}


def first_nonfinite(steps: list[dict]) -> dict:
    """Where NaN/inf first appears (rank and step of a non-finite loss) and how it spread: the
    ranks whose synchronised gradients and parameters were non-finite, and loss-scale moves."""
    bad = lambda v: v is None or not math.isfinite(v)  # noqa: E731
    losses = [s for s in steps if bad(s.get("loss"))]
    first = min(losses, key=lambda s: (s["step"], s["rank"])) if losses else None
    step = first["step"] if first else None
    at = [s for s in steps if s["step"] == step]
    later = [s for s in steps if step is not None and s["step"] > step]
    scales = [(s["step"], s["scale"]) for s in steps if s["rank"] == 0 and s.get("scale")]
    return {"step": step, "rank": first["rank"] if first else None,
            "loss_nonfinite_ranks": sorted(s["rank"] for s in at if bad(s.get("loss"))),
            "grads_nonfinite_ranks": sorted(s["rank"] for s in at if not s.get("grads_finite")),
            "params_nonfinite_ranks": sorted({s["rank"] for s in at + later
                                              if not s.get("params_finite")}),
            "finite_again": bool(later) and all(bad(s.get("loss")) is False for s in later),
            "scales": scales}


def sigterm_t(launcher_text: str, near_t: float) -> float | None:
    """When torchrun sent the surviving ranks SIGTERM: the time on its "Sending process N closing
    signal SIGTERM" line (glog's local month, day and time), as a time.time() value; `near_t`
    (the fault's time.time()) gives the year."""
    import datetime as dt
    m = CLOSING.search(launcher_text or "")
    if not m or near_t is None:
        return None
    month, day, hms = int(m.group(1)), int(m.group(2)), m.group(3)
    year = dt.datetime.fromtimestamp(near_t).year
    when = dt.datetime.strptime(f"{year}-{month:02d}-{day:02d} {hms}", "%Y-%m-%d %H:%M:%S.%f")
    return when.timestamp()


def killed(out) -> dict:
    """What the launcher said, the rank it blamed, what the survivors got and when; for torchrun
    also when it sent the survivors SIGTERM (`stop_after_s`, from its own log line)."""
    t0 = out.fault_t or 0.0
    text = out.launcher_text() if hasattr(out, "launcher_text") else ""
    grace = GRACE.search(text)
    stop = sigterm_t(text, out.fault_t)
    return {"blamed": out.blamed, "message": first_line(out.failure or ""),
            "grace_s": float(grace.group(1)) if grace else None,
            "stop_after_s": stop - t0 if stop is not None and out.fault_t else None,
            "launcher_after_s": out.ended_t - t0 if out.fault_t else None,
            "survivors": {r: (round(a, 3), first_line(e)) for r, (a, e) in out.caught.items()}}
