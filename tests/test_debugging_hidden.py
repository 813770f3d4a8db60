"""dltutor.debug.hidden: the fault-to-message table of notebook 08, on made-up step reports (the
real runs behind it are tested in test_debugging.py and by the notebook itself)."""
from __future__ import annotations

from types import SimpleNamespace

from dltutor.debug import hidden


def outcome(fault, steps, fault_t=10.0, caught=None, failure="", ended_t=None, fault_rank=1):
    return SimpleNamespace(fault=fault, fault_rank=fault_rank, fault_t=fault_t,
                           caught=caught or {}, failure=failure, ended_t=ended_t,
                           steps=lambda: steps)


def step(rank, n, t, **kw):
    base = {"rank": rank, "step": n, "t": t, "loss": 1.0, "compute_s": 0.004,
            "update_error": 0.0, "buffer_sums": [1.0, 1.0], "param_sums": [2.0, 2.0]}
    return {**base, **kw}


def test_each_fault_is_timed_from_its_first_naming_report():
    quiet = outcome("none", [step(0, 1, 9.0), step(1, 1, 9.0)])
    hang = outcome("skip", [], caught={0: (5.02, "RuntimeError: Timed out waiting 5000ms\nmore")})
    drift = {"outside_ddp": outcome("outside_ddp", [step(0, 2, 9.5), step(1, 3, 10.25,
                                                                          update_error=0.01)]),
             "bn_buffer": outcome("bn_buffer", [step(0, 1, 10.5, buffer_sums=[1.0, 1.5])])}
    slow = outcome("straggler", [step(1, 1, 10.5, compute_s=0.004), step(1, 2, 10.75, compute_s=0.2)])
    nan = outcome("nan", [step(1, 3, 10.125, loss=float("nan")), step(0, 3, 10.2, loss=float("inf"))])
    killed = outcome("kill", [], caught={0: (0.03, "Connection closed by peer")},
                     failure="rank 1 failed (exit -9)\nlog tail", ended_t=10.1)
    rows = hidden.time_to_message(hang=hang, order=quiet, shape=quiet, dtype=quiet,
                                  no_set_epoch=outcome("set_epoch", [step(1, 4, 10.5,
                                                                          same_ids_as_last_epoch=True)]),
                                  drift=drift, slow=slow, nan=nan, killed=killed, slow_ms=120,
                                  group_timeout_s=5.0)
    by = {(r["section"], r["fault"]): r for r in rows}
    assert by[("1 hang", "skip")]["first_message_s"] == 5.02
    assert by[("1 hang", "skip")]["message"] == "rank 0: RuntimeError: Timed out waiting 5000ms"
    assert by[("1 order+DETAIL", "none")]["message"] == "no rank raised anything"
    assert by[("2 set_epoch", "set_epoch")]["message"] == "rank 1: step 4 repeats last epoch's batch"
    assert by[("3 drift", "outside_ddp")]["first_message_s"] == 0.25        # not rank 0's clean step
    assert by[("3 drift", "bn_buffer")]["message"] == "rank 0: checksums differ at step 1"
    assert by[("4 straggler", "straggler")]["message"] == "rank 1: compute 200 ms at step 2"
    assert by[("5 nan", "nan")]["first_message_s"] == 0.125                  # NaN first, then inf
    assert by[("6 kill (launcher)", "kill")]["message"] == "rank 1 failed (exit -9)"
    assert abs(by[("6 kill (launcher)", "kill")]["first_message_s"] - 0.1) < 1e-9


def test_step_tables_of_the_drift_and_nan_sections():
    out = outcome("outside_ddp", [step(0, 1, 1.0), step(1, 3, 1.0, param_sums=[2.0, 2.5]),
                                  step(0, 5, 1.0)])
    rows = hidden.checksum_rows(out, last_step=4)
    assert [(r["step"], r["param_sum_r1"]) for r in rows] == [(1, 2.0), (3, 2.5)]
    nan = outcome("nan", [step(1, n, 1.0, scale=None) for n in range(6)])
    rows = hidden.nonfinite_rows({"plain": nan, "scaled": nan}, around_step=3)
    assert [(r["run"], r["step"]) for r in rows] == [("plain", 2), ("plain", 3), ("plain", 4),
                                                     ("scaled", 2), ("scaled", 3), ("scaled", 4)]
