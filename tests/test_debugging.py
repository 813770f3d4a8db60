"""Notebook 08's faults, each reproduced on 2 real gloo ranks and diagnosed by the tool that finds
it (dltutor.debug). Each test fails if its tool stops naming the right rank, step or cause.

Every broken run is bounded by a 5 s process-group timeout; after each, no process of the launch
may survive (the launcher's guarantee, checked on the hangs themselves). Launches are shared
through module-scoped fixtures.
"""
from __future__ import annotations

import pickle

import psutil
import pytest

from dltutor.core import course
from dltutor.debug import diagnose, findings, flight, runs, stacks

pytestmark = pytest.mark.slow
PG = 5.0


def run(fault, **kw):
    kw.setdefault("pg_timeout", PG)
    return runs.run_fault(fault, **kw)


def _nothing_left(out):
    assert out.left_running == [], f"processes of the launch survived: {out.left_running}"
    pids = [m["pid"] for m in out.of("start")]
    assert len(pids) == 2
    alive = [p for p in pids if psutil.pid_exists(p)
             and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"rank processes still alive: {alive}"


@pytest.fixture(scope="module")
def hang():
    return run("skip", fault_rank=1, fault_step=3, flight_recorder=True, stack_dump=True)


@pytest.fixture(scope="module")
def healthy():
    return run("none", checks=True)


# ------------------------------------------------------------------ 1. hangs
def test_a_skipped_collective_hangs_until_the_timeout_and_leaves_nothing(hang):
    d = diagnose.hang(hang)
    assert {r["rank"] for r in d["rows"]} == {0, 1}
    assert any(r["timeout_ms"] == int(PG * 1000) for r in d["rows"]), d
    assert all(r["mismatch"] is None for r in d["rows"])       # a timeout names nothing
    assert hang.failure and hang.fault_rank == 1
    _nothing_left(hang)


def test_flight_recorder_analyzer_names_the_rank_at_the_sequence_number(hang):
    found = flight.findings(hang.fr_text)
    stuck_seq = hang.fr_last[0]["last_seq"]          # rank 0 waits in its loss all-reduce
    assert hang.fr_last[0]["op"] == "gloo:all_reduce"
    assert any(f["seq"] == stuck_seq and f["ranks"] == [1] for f in found), hang.fr_text[:2000]
    assert "Culprit rank 1" in hang.fr_text or "missing ranks: {1}" in hang.fr_text


def test_flight_recorder_dumps_put_the_skipping_rank_ahead(hang):
    pos = flight.behind_and_ahead(hang.fr_last)     # rank 1 skipped: it ran on, rank 0 waits
    assert (pos["behind"], pos["ahead"]) == ([0], [1]), hang.fr_last
    assert pos["there"][1] not in (None, pos["op"]), pos
    text = " ".join(findings.flight(hang))
    assert "the rank ahead is the culprit and the rank behind is the healthy one" in text, text


def test_gloo_dumps_need_the_pg_config_rekeyed(hang):
    raw = {"pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
           "entries": [{"process_group": ("0", "default_pg")}]}
    assert flight.rekey(raw)["pg_config"] == {"0": {"name": "0", "desc": "default_pg",
                                                    "ranks": "[0, 1]"}}
    dumped = pickle.loads(next((hang.log_dir / "fr").glob(flight.PREFIX + "*")).read_bytes())
    assert "" not in dumped["pg_config"] and "0" in dumped["pg_config"]


def test_py_spy_shows_the_line_each_rank_waits_on(hang):
    lab = course.lab(runs.LAB).read_text().splitlines()
    forward = next(i for i, ln in enumerate(lab, 1) if "net(x)" in ln)
    assert set(hang.stacks) == {0, 1}, hang.stacks
    assert "log_loss (faults.py" in stacks.waiting_line(hang.stacks[0])
    assert stacks.waiting_line(hang.stacks[1]) == f"main (faulty_train.py:{forward})", hang.stacks[1]


@pytest.mark.parametrize("fault,ops", [("order", {"ALLREDUCE", "BROADCAST"}), ("dtype", None)])
def test_detail_names_sequence_number_and_both_ops(fault, ops):
    out = run(fault, fault_rank=1, fault_step=3, detail=True)
    found = [r["mismatch"] for r in diagnose.hang(out)["rows"] if r["mismatch"]]
    assert found, out.caught
    a, b = found[0]["a"], found[0]["b"]
    assert a["seq"] == b["seq"] and {a["rank"], b["rank"]} == {0, 1}
    if ops:
        assert {a["op"], b["op"]} == ops
    else:
        assert {a["dtype"], b["dtype"]} == {"Float", "Double"} and a["op"] == b["op"] == "ALLREDUCE"
    _nothing_left(out)


# ------------------------------------------------------------------ 2. mismatches and set_epoch
def test_fingerprint_check_names_the_rank_with_the_other_shape():
    out = run("shape", fault_rank=0, fault_step=2, checks=True)
    errors = [e for _, e in out.caught.values()]
    assert errors and all("rank 0: numel 2" in e and "rank 1: numel 1" in e for e in errors), errors


def test_forgotten_set_epoch_is_seen_by_the_batch_fingerprints(healthy):
    out = run("set_epoch", checks=True)
    assert diagnose.same_order(out.steps())["epochs"] == [1]
    assert diagnose.same_order(healthy.steps())["epochs"] == []


# ------------------------------------------------------------------ 3. silent divergence
@pytest.mark.parametrize("fault,rank", [("outside_ddp", 1), ("random_op", 0)])
def test_checksums_name_the_drifting_rank(fault, rank):
    d = diagnose.divergence(run(fault, fault_rank=rank, fault_step=3, checks=True).steps())
    assert d["what"] == "parameter" and d["step"] == 3 and d["ranks"] == [rank], d


def test_unsynchronised_batchnorm_buffers_differ_while_parameters_agree(healthy):
    d = diagnose.divergence(run("bn_buffer", checks=True).steps())
    assert d["what"] == "buffer" and d["ranks"] == [], d
    assert diagnose.divergence(healthy.steps())["what"] is None


# ------------------------------------------------------------------ 4. straggler
def test_step_times_name_the_straggler_and_the_wait_of_the_others(healthy):
    d = diagnose.straggler(run("straggler", fault_rank=0, fault_step=0, slow_ms=100).steps())
    assert d["slow_rank"] == 0, d
    assert d["others_wait_ms"] > 0.5 * 100, d          # rank 1 waits in the all-reduce
    assert diagnose.straggler(healthy.steps())["others_wait_ms"] < 50


# ------------------------------------------------------------------ 5. NaN
def test_nan_is_named_where_it_begins_and_reaches_every_rank():
    d = diagnose.first_nonfinite(run("nan", fault_rank=1, fault_step=3).steps())
    assert (d["rank"], d["step"]) == (1, 3) and d["loss_nonfinite_ranks"] == [1], d
    assert d["grads_nonfinite_ranks"] == [0, 1] and d["params_nonfinite_ranks"] == [0, 1], d


def test_loss_scaling_skips_the_step_and_halves_the_scale():
    out = run("nan", fault_rank=0, fault_step=2, loss_scale=True)
    d = diagnose.first_nonfinite(out.steps())
    assert (d["rank"], d["step"]) == (0, 2) and d["params_nonfinite_ranks"] == [], d
    assert d["finite_again"] and d["scales"][0][1] == 2 * d["scales"][-1][1], d
    assert diagnose.skipped_step(out.steps(), 2)["unchanged"] == [0, 1], out.steps()


# ------------------------------------------------------------------ 6. a killed rank
@pytest.mark.parametrize("backend", ["local", "torchrun"])
def test_the_launcher_names_the_killed_rank(backend):
    out = run("kill", fault_rank=1, fault_step=3, backend=backend)
    k = diagnose.killed(out)
    assert k["blamed"] == [1], out.failure
    assert k["message"].startswith("rank 1 failed"), k
    if backend == "torchrun":
        assert any("-9" in ln for ln in runs.launcher_lines(out, ("exitcode",))), runs.launcher_lines(out)
    else:   # the warm start waits STOP_GRACE before its SIGTERM: the survivor's error is kept
        assert list(k["survivors"]) == [0], (k, runs.launcher_lines(out))
        assert "stopping the other ranks in 1 s" in "\n".join(runs.launcher_lines(out)), out.failure
        assert "killed by signal 9, SIGKILL" in k["message"], k
        assert diagnose.killed(out)["grace_s"] == 1.0
    _nothing_left(out)


def test_a_killed_run_that_never_reached_its_kill_is_one_clear_error(tmp_path):
    # seen on the H200 node: torchrun refused a flag and ran no rank; the finding then failed
    # on a None time instead of saying the run showed nothing about a kill
    from dltutor.debug import findings
    from dltutor.debug.runs import Outcome
    out = Outcome("kill", failure="torchrun exited with 2: usage: run.py [-h] ...",
                  log_dir=tmp_path, backend="torchrun")
    with pytest.raises(RuntimeError, match=r"torchrun: the run ended before any rank reached the "
                       r"kill.*usage: run\.py.*launcher\.log"):
        findings.killed(out, "torchrun")
