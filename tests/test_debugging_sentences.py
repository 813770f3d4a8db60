"""Notebook 08 after an expert read: each sentence it prints says what its run decides, and says
which condition and which baseline it comes from. Made-up runs (no launch); the real faults are
run in test_debugging.py and by the notebook itself."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import nbformat

from dltutor.debug import diagnose, findings, hidden, runs
from dltutor.launch import results
from dltutor.launch.run import get_backend

NOTEBOOK = (Path(__file__).resolve().parents[1] / "course" / "notebooks"
            / "08_debugging_distributed.ipynb")


def cells() -> dict:
    return {c.id: c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells}


def outcome(fault, steps=(), fault_t=10.0, caught=None, failure="", ended_t=None, fault_rank=1,
            events=(), log_dir=None):
    metrics = list(events)
    return SimpleNamespace(fault=fault, fault_rank=fault_rank, fault_t=fault_t, caught=caught or {},
                           failure=failure, ended_t=ended_t, steps=lambda: list(steps),
                           metrics=metrics, log_dir=log_dir, blamed=[1],
                           of=lambda e: [m for m in metrics if m.get("event") == e])


def step(rank, n, **kw):
    base = {"rank": rank, "step": n, "epoch": 0, "t": 10.0 + n, "loss": 1.0, "compute_s": 0.01,
            "backward_s": 0.01, "step_s": 0.03, "update_error": 0.0, "buffer_sums": [1.0, 1.0],
            "param_sums": [2.0, 2.0]}
    return {**base, **kw}


# ---- 1. the launcher's line keeps the signal, and says why the other rank stopped
def test_the_launcher_names_the_signal_and_why_the_peer_stopped(tmp_path):
    run = SimpleNamespace(
        backend=get_backend("local"), watchdog=False, first_error={0: 1.0},
        launcher_lines=["rank 1 failed (exitcode: -9); stopping the other ranks in 1 s (SIGTERM)",
                        "rank 0 exited with code 1", "rank 1 exited with code -9"],
        tails={0: ["RuntimeError: [pair.cc:561] Connection closed by peer [127.0.0.1]:1"],
               1: ["step 3"]})
    run.blame = lambda: (results.blame_ranks({0: 1, 1: -9}, lambda r: "\n".join(run.tails[r]),
                                             run.backend.stop_codes), [0, 1])
    text = results.failure_message(run, 1, tmp_path, 30.0)
    first, second = text.splitlines()[:2]
    assert first == "rank 1 failed (rank 1: killed by signal 9, SIGKILL: exit code -9; launcher exit code 1).", text
    assert second == ("rank 0 stopped too (exit code 1): it lost its peer in a collective (its own "
                      "last lines say so)."), text


def test_the_survivor_raised_before_the_launchers_grace(tmp_path):
    (tmp_path / "launcher.log").write_text("rank 1 failed (exitcode: -9); stopping the other ranks "
                                           "in 1 s (SIGTERM)\n")
    out = runs.Outcome("kill", log_dir=tmp_path, failure="rank 1 failed (...)", blamed=[1],
                       ended_t=10.1, metrics=[{"event": "fault", "rank": 1, "t": 10.0},
                                              {"event": "caught", "rank": 0, "t": 10.03,
                                               "error": "Connection closed by peer"}])
    text = " ".join(findings.killed(out, "course launcher"))
    assert "rank 0 raised its own error 0.03 s after the kill, before the launcher's 1 s grace" in text


# ---- 2. the hang and DETAIL are two faults; the hang's time is the timeout chosen
def test_takeaways_do_not_put_two_faults_side_by_side():
    timing = [{"section": "1 hang", "first_message_s": 8.01},
              {"section": "1 order+DETAIL", "first_message_s": 0.007}]
    quiet = outcome("none", [step(0, 1), step(1, 1)])
    killed = outcome("kill")
    killed.ended_t = None
    lines = findings.takeaways(timing, quiet, quiet, quiet, quiet, quiet,
                               SimpleNamespace(fault_t=None, blamed=[], failure="", caught={},
                                               ended_t=0.0), 8.0)
    text = " ".join(lines)
    assert "DETAIL named a mismatch" not in text
    assert "Another fault, collectives in a different order" in text and "30 min" in text


# ---- 3 + 5. the time-to-message table says under which condition each fault was found
def test_each_row_says_what_found_it_and_the_caveats_come_from_the_runs():
    long = "Detected mismatch between collectives on ranks. " + "word " * 60
    quiet = outcome("order", caught={1: (0.007, long)})
    set_epoch = outcome("set_epoch", [step(0, n, epoch=n // 4, same_ids_as_last_epoch=n >= 4)
                                      for n in range(8)], fault_rank=0)
    bn = outcome("bn_buffer", [step(0, 1, buffer_sums=[1.0, 1.5])], fault_rank=0,
                 events=[{"event": "fault", "rank": 0, "step": 0}, {"event": "fault", "rank": 1, "step": 0}])
    slow = outcome("straggler", [step(1, 0, compute_s=0.35)])
    hang = outcome("skip", caught={0: (8.01, "[/__w/pytorch/third_party/gloo/gloo/x.cc:78] Timed out")})
    killed = outcome("kill", caught={0: (0.03, "closed")}, failure="rank 1 failed", ended_t=10.1)
    rows = hidden.time_to_message(hang=hang, order=quiet, shape=quiet, dtype=quiet,
                                  no_set_epoch=set_epoch, drift={"bn_buffer": bn}, slow=slow,
                                  nan=outcome("nan"), killed=killed, slow_ms=200,
                                  group_timeout_s=8.0)
    by = {r["fault"]: r for r in rows if r["section"] != "6 kill (launcher)"}
    assert by["skip"]["found_by"].startswith("no tool") and "8 s" in by["skip"]["found_by"]
    assert by["skip"]["message"] == "rank 0: Timed out"
    assert "DETAIL" in by["order"]["found_by"] and by["order"]["message"].endswith(" …")
    assert by["set_epoch"]["fault_rank"] == "all" and by["bn_buffer"]["fault_rank"] == "all"
    healthy = outcome("none", [step(1, 0, compute_s=0.15)] + [step(1, n) for n in range(1, 4)])
    text = " ".join(hidden.caveats(rows, no_set_epoch=set_epoch, slow=slow, healthy=healthy,
                                   drift={"bn_buffer": bn}, group_timeout_s=8.0))
    assert "One run each, no repeats" in text and "30 min" in text
    assert "about one epoch (4 steps)" in text and "[(0, 0), (1, 0)]" in text
    assert "step 0 computed 150 ms vs 10.0 ms" in text


def test_the_unchecked_mismatch_is_reported_from_its_run():
    out = outcome("shape", caught={0: (8.03, "[x] Timed out waiting 8000ms for send"),
                                   1: (8.02, "[x] Timed out waiting 8000ms for send")})
    text = " ".join(findings.unchecked(out))
    assert "Every rank ended at the group's timeout" in text and "8.03 s" in text


# ---- 6. the straggler: the stand-in, the baseline and the spread
def test_straggler_names_its_stand_in_baseline_and_spread():
    def run(slow_ms, compute1, backward0, fault_t=10.0):
        steps = [step(r, n, compute_s=(compute1 if r == 1 else 0.01) + 0.001 * n,
                      backward_s=(backward0 if r == 0 else 0.004) + 0.001 * n,
                      step_s=0.05 + compute1 + 0.001 * n) for n in range(8) for r in (0, 1)]
        ev = [{"event": "fault", "rank": 1, "step": 0, "slow_ms": slow_ms}] if slow_ms else []
        return outcome("straggler" if slow_ms else "none", steps, events=ev)
    slow, healthy = run(200, 0.2, 0.19), run(0, 0.01, 0.012)
    d = diagnose.straggler(slow.steps())
    assert d["rows"][0]["steps"] == 7 and d["rows"][0]["backward_ci"] > 0
    assert abs(d["rows"][0]["rest_ms"] - (d["rows"][0]["step_ms"] - d["rows"][0]["compute_ms"]
                                          - d["rows"][0]["backward_ms"])) < 1e-9
    text = " ".join(findings.straggler(slow, fixed=healthy))
    assert "the median of its 7 steps after step 0 (warm-up) and their range" in text
    assert "sleeps 200 ms per step (time.sleep, standing in for a busy core" in text
    assert "rank 0's backward (it holds the wait for the slow rank in DDP's all-reduce)" in text
    assert "in the healthy run" in text and "The slow rank's own backward" in text


# ---- 8. NaN printed as nan; the skipped step computed from the parameters
def test_nan_is_printed_and_the_skip_is_read_from_the_parameters():
    nan = float("nan")
    plain = outcome("nan", [step(1, 3, loss=nan, grads_finite=False, params_finite=False)])
    assert hidden.nonfinite_rows({"plain": plain}, 3)[0]["loss"] == "nan"

    def scaled(after):
        return outcome("nan", [step(r, n, loss=nan if (r, n) == (1, 3) else 1.0, scale=s,
                                    grads_finite=n != 3, params_finite=True,
                                    own_param_sum=after if n >= 3 else 5.0)
                               for n, s in ((2, 65536.0), (3, 65536.0), (4, 32768.0)) for r in (0, 1)])
    assert diagnose.skipped_step(scaled(5.0).steps(), 3)["unchanged"] == [0, 1]
    text = " ".join(findings.nonfinite(plain, scaled=scaled(5.0)))
    assert "checksums of rank(s) [0, 1] were exactly equal to the step before's" in text
    assert "the update was skipped" in text and "bit-for-bit" not in text
    text = " ".join(findings.nonfinite(plain, scaled=scaled(6.0)))
    assert "it was NOT skipped" in text


# ---- 10. py-spy: the collective, the lab line with its source, and the step it is in
def test_py_spy_lines_name_the_collective_and_the_lab_line():
    from dltutor.core import course
    lab = course.lab(runs.LAB).read_text().splitlines()
    fwd = next(i for i, ln in enumerate(lab, 1) if "net(x)" in ln)
    dump = ("Thread 1 (idle): \"MainThread\"\n"
            "    DistributedDataParallel._sync_buffers (torch/nn/parallel/distributed.py:2426)\n"
            f"    main (faulty_train.py:{fwd})\n    <module> (faulty_train.py:155)\n")
    out = outcome("skip", [step(1, 3)])
    out.stacks = {1: dump}
    line = findings.stack_lines(out)[0]
    assert line.startswith("rank 1 waits in DistributedDataParallel._sync_buffers (distributed.py:2426)")
    assert f"faulty_train.py:{fwd}: `loss = torch.nn.functional.cross_entropy(net(x), y)`" in line
    assert "its last step report is step 3, so this is the step after it" in line
    from dltutor.debug import stacks
    assert stacks.until_lab(dump).splitlines()[-1].strip() == f"main (faulty_train.py:{fwd})"


# ---- 12 + 14. wording from the run's own terms
def test_buffers_are_never_averaged_and_counts_are_counts():
    bn = outcome("bn_buffer", [step(0, 1, buffer_sums=[1.0, 1.5])])
    text = findings.divergence(bn)[0]
    assert "DDP never averages them" in text and "DDP does not average" not in text
    from dltutor.debug import exercise_hang_judge
    src = Path(exercise_hang_judge.__file__).read_text()
    assert "how many values each rank held, per case" in src and "values per rank in each" not in src


def test_the_run_size_is_a_parameter_and_printed():
    c = cells()
    assert "SAMPLES, BATCH, EPOCHS = 128, 16, 2" in c["677fc0b3"]
    assert "size_line" in c["f0b67c2d"] and "default_pg_nccl_timeout" in c["f0b67c2d"]
    assert runs.size_args(128, 16, 2) == ("--samples", 128, "--batch-size", 16, "--epochs", 2)
    assert "SYNTHETIC" in runs.size_line(128, 16, 2, 2) and "4 steps per epoch, 8 steps" in \
        runs.size_line(128, 16, 2, 2)


# ---- 3, 4, 7, 9, 11, 13 and the gaps: the markdown says what the runs can back
def test_the_markdown_claims_only_what_it_can_back():
    c = cells()
    md = " ".join(" ".join(c[k].split()) for k in c)
    assert "DETAIL` and py-spy work the same on NCCL" not in md
    assert "py-spy does not name the collective there" in md
    assert "a crashed peer, then \"Connection reset by peer\"" not in md and "UNCHECKED" in md
    assert "stop-flag broadcast after it" in " ".join(c["e583f49d"].split())
    assert "at least two extra collectives per call" in " ".join(c["464f068d"].split())
    assert "from the last checkpoint (torch docs" not in md
    assert "a lost node, noticed only at the timeout, is not shown" in " ".join(c["53ceea1f"].split())
    assert "What this notebook leaves out" in md and "monitored_barrier" in md


def test_the_straggler_plot_stacks_the_rest_of_the_step_and_says_one_run():
    import matplotlib
    matplotlib.use("Agg")
    from dltutor.debug import plots
    row = {"rank": 0, "steps": 7, "compute_ms": 5.0, "backward_ms": 10.0, "rest_ms": 20.0}
    fig = plots.plot_straggler([row], [row])
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(label.startswith("rest of the step") for label in labels), labels
    assert "mean of 7 steps after step 0, one run each" in ax.get_xlabel()
    assert max(p.get_x() + p.get_width() for p in ax.patches) == 35.0
