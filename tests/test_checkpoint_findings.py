"""Notebook 10's numbers and sentences: dltutor.checkpoint.lab_runs and dltutor.checkpoint.findings.

The sentences are fed made-up numbers, once where the resume is exact and once where it is not,
and must follow them (never "bit for bit" over a difference, never a difference over equal runs).
lab_runs' comparison is fed made-up metrics, then runs once for real (--tiny, 2 gloo ranks): the
resume it compares is exact, the resume without the RNG states it makes is not.
"""
from __future__ import annotations

import pytest

from dltutor.checkpoint import findings, lab_runs, plots


def gap(**over) -> dict:
    base = {"wrap": "ddp", "world_size": 2, "stop_at": 3, "resumed_from": 3, "total_steps": 8,
            "steps": 16, "loss_max_diff": 0.0, "first_diff_step": None, "param_max_diff": 0.0,
            "same_digest": True, "hardware": "CPU/gloo"}
    return {**base, **over}


def restart_row(**over) -> dict:
    base = {"kind": "rank killed", "rc": 0, "restart_count": 1, "max_restarts": 1, "killed_rank": 1,
            "killed_step": 5, "kill_where": "after the optimizer step", "resumed_from": 4,
            "steps_redone": 1, "kill_to_training_s": 6.5, "skipped": {}, "steps": 8,
            "param_max_diff": 0.0, "same_digest": True, "hardware": "CPU/gloo"}
    return {**base, **over}


# ------------------------------------------------------------------ the sentences follow the numbers
def test_an_exact_resume_is_called_bit_for_bit():
    [line] = findings.resume([gap()])
    assert "bit for bit" in line and "NOT" not in line
    assert "all 10 losses after the resume (every rank, steps 4-8) and the 6 before it" in line
    assert "largest difference 0.0" in line


@pytest.mark.parametrize("over,says", [
    ({"param_max_diff": 3e-8, "same_digest": False}, "the final parameters by up to 3e-08"),
    ({"first_diff_step": 5, "loss_max_diff": 0.012, "param_max_diff": 0.004, "same_digest": False},
     "first differ at step 5, 2 step(s) after the resume from step 3 (by up to 0.012)"),
])
def test_a_resume_that_differs_is_not_bit_for_bit_and_says_by_how_much(over, says):
    [line] = findings.resume([gap(**over)])
    assert "NOT bit for bit" in line and says in line, line


def test_a_resume_from_another_step_than_the_stop_says_so():
    [line] = findings.resume([gap(resumed_from=2)])
    assert "(not step 3, where it stopped)" in line


def test_parts_name_what_each_left_out_part_changed_and_what_it_did_not():
    rows = [{"left_out": "rng", **gap(first_diff_step=4, loss_max_diff=0.08, param_max_diff=0.005,
                                      same_digest=False)},
            {"left_out": "data", **gap()}]
    lines = findings.parts(rows)
    assert lines[0].startswith("Without `rng` (the dropout generators") and "step 4" in lines[0]
    assert "did not need it" in lines[1] and "NOT" not in lines[1]
    assert lines[-1] == ("Each of rng was needed for a bit-for-bit resume here; data made no "
                         "difference in this run.")
    assert findings.parts([{"left_out": "rng", **gap()}])[-1].startswith("No part left out changed")


def test_reshard_is_exact_only_when_every_row_is():
    rows = [{"loaded_on": "2 ranks", "resumed_from": 8, "param_max_diff": 0.0},
            {"loaded_on": "one process, no process group", "resumed_from": 8, "param_max_diff": 0.0}]
    result = {"rows": rows, "save_ranks": 4, "step": 8, "wrap": "fsdp2", "hardware": "CPU/gloo"}
    [line] = findings.reshard(result)
    assert "the parameters reshard exactly" in line and "Saved on 4 FSDP2 ranks (CPU/gloo)" in line
    rows[1]["param_max_diff"] = 1.5e-7
    lines = findings.reshard(result)
    assert "exact" in lines[0] and "2 ranks" in lines[0] and "one process" not in lines[0]
    assert "one process, no process group: NOT exact" in lines[1] and "1.5e-07" in lines[1]
    assert not any("reshard exactly" in ln for ln in lines)


def test_a_restart_reports_its_step_its_seconds_and_the_skipped_folder():
    torn = restart_row(kind="save killed", killed_rank=0, killed_step=6, steps_redone=2,
                       kill_where="inside the save, before .metadata",
                       skipped={"step-000006": ["__0_0.distcp", "__1_0.distcp"]})
    lines = findings.restart([restart_row(), torn])
    assert "rank 1 was SIGKILLed at step 5" in lines[0] and "resumed from step 4" in lines[0]
    assert "redid 1 step(s)" in lines[0] and "6.5 s after the kill" in lines[0]
    assert "bit for bit" in lines[1]
    assert "step-000006 (2 shard file(s), no .metadata) was skipped" in lines[2]


def test_a_restart_that_differs_or_fails_says_so():
    [_, line] = findings.restart([restart_row(param_max_diff=2e-6, same_digest=False)])
    assert "NOT bit for bit" in line and "2e-06" in line
    [line] = findings.restart([restart_row(rc=1, restart_count=None)])
    assert "did not finish" in line and "exit code 1" in line


def test_takeaways_follow_the_numbers():
    parts = [{"left_out": "rng", **gap(first_diff_step=4, param_max_diff=0.1, same_digest=False)}]
    reshard = {"rows": [{"loaded_on": "3 ranks", "param_max_diff": 0.0}], "save_ranks": 4}
    lines = findings.takeaways([gap(), gap(wrap="fsdp2", param_max_diff=1e-9)], parts, reshard,
                               [restart_row()])
    assert lines[0] == "Stop and resume was bit for bit for DDP; NOT for FSDP2."
    assert "rng broke it" in lines[1] and "(the parameters exact)" in lines[2]
    assert "1 step(s) redone, final parameters bit for bit" in lines[3]


def test_plots_draw_both_curves_and_carry_the_runs_labels(monkeypatch):
    monkeypatch.setenv("DLTUTOR_FAST", "1")
    whole, resumed = ([1, 2, 3, 4], [2.3, 2.2, 2.1, 2.0]), ([1, 2, 3, 4], [2.3, 2.2, 2.1, 2.0])
    fig = plots.plot_resume({"ddp": {"whole": whole, "resumed": resumed}}, 2, "CPU/gloo")
    assert "[Fashion-MNIST, CPU/gloo, fast mode]" in fig._suptitle.get_text()
    assert [len(line.get_xdata()) for line in fig.axes[0].lines][:2] == [4, 4]
    fig = plots.plot_parts(whole, {"rng": ([1, 2, 3, 4], [2.3, 2.2, 2.0, 1.9])}, 2, "GPU/nccl")
    ax = fig.axes[0]
    assert "GPU/nccl" in ax.get_title() and list(ax.lines[1].get_xdata()) == [3, 4]
    assert [round(y, 6) for y in ax.lines[1].get_ydata()] == [-0.1, -0.1]   # minus the uninterrupted


# ------------------------------------------------------------------ lab_runs compares step by step
def fake_run(first_step, losses_by_rank):
    return {"metrics": [{"rank": r, "first_step": first_step, "losses": list(v)}
                        for r, v in sorted(losses_by_rank.items())]}


def test_loss_gap_pairs_each_rank_and_step_and_finds_the_first_difference():
    whole = fake_run(0, {0: [1.0, 0.9, 0.8, 0.7], 1: [1.1, 1.0, 0.9, 0.8]})
    first = fake_run(0, {0: [1.0, 0.9], 1: [1.1, 1.0]})
    same = fake_run(2, {0: [0.8, 0.7], 1: [0.9, 0.8]})
    assert lab_runs.loss_gap(whole, first, same) == {"steps": 8, "loss_max_diff": 0.0,
                                                     "first_diff_step": None}
    off = fake_run(2, {0: [0.8, 0.7], 1: [0.9, 0.8 + 2.0 ** -40]})   # one bit, rank 1, step 4
    got = lab_runs.loss_gap(whole, first, off)
    assert got["first_diff_step"] == 4 and 0 < got["loss_max_diff"] < 1e-11
    assert lab_runs.curve(first, off, rank=1) == ([1, 2, 3, 4], [1.1, 1.0, 0.9, 0.8 + 2.0 ** -40])


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    root = tmp_path_factory.mktemp("nb10")
    pair = lab_runs.resume_runs(root, "ddp", ["--tiny"], stop_at=3)
    return {"pair": pair, "no_rng": lab_runs.left_out(root, pair, parts=("rng",))["rng"]}


def test_a_real_resume_is_measured_exact(real):
    g = lab_runs.resume_gap(real["pair"])
    assert (g["resumed_from"], g["total_steps"], g["steps"]) == (3, 8, 16)
    assert findings.exact(g) and g["same_digest"]


def test_a_real_resume_without_the_rng_states_is_measured_different(real):
    r = real["no_rng"]
    assert r["resumed_from"] == 3, "the copy must hold only the stopped run's folders"
    assert r["first_diff_step"] == 4 and r["param_max_diff"] > 0 and not r["same_digest"]
    assert r["curve"][0] == list(range(1, 9))


def test_a_real_reshard_compares_each_load_and_the_converted_file(tmp_path):
    res = lab_runs.reshard_runs(tmp_path, ["--tiny"], save_ranks=3, load_on=(1,))
    one, file = res["rows"]
    assert (res["step"], one["loaded_on"], one["wrap"]) == (8, "one process, no process group", "none")
    assert file["loaded_on"] == "a dcp_to_torch file" and (tmp_path / "reshard.torch.pt").is_file()
    assert one["param_max_diff"] == 0.0 == file["param_max_diff"] and one["same_digest"] and file["same_digest"]
    assert "the parameters reshard exactly" in findings.reshard(res)[0]


def _segments(stop_steps=(14, 14), digest="ab" * 32):
    ranks = [{"signal_stop_step": s} for s in stop_steps]
    return {"job_id": "7", "state": "COMPLETED", "log": "x.out", "param_digest": digest,
            "segments": [{"restart_count": 0, "nodes": "node1", "stop": "SIGUSR1", "status": 75,
                          "resumed_from": None, "last_step": stop_steps[0], "ranks": ranks},
                         {"restart_count": 1, "nodes": "node1", "stop": "completed", "status": 0,
                          "resumed_from": stop_steps[0], "last_step": 120, "ranks": []}]}


def test_the_requeue_sentences_follow_the_job():
    text = "\n".join(findings.requeue(_segments(), {"param_digest": "ab" * 32}))
    assert "ran 2 time(s), one log" in text
    assert "on SIGUSR1 the 2 ranks' metrics lines say they stopped after step 14, saved it and the step " \
           "exited 75 (the same step" in text
    assert "Segment 1 (SLURM_RESTART_COUNT=1, on node1): resumed from step 14; trained to step 120" in text
    assert "bit for bit" in text and "NOT" not in text
    text = "\n".join(findings.requeue(_segments((14, 15), "cd" * 32), {"param_digest": "ab" * 32}))
    assert "DIFFERENT steps" in text and "NOT bit for bit" in text
    empty = {"job_id": "8", "state": "FAILED", "log": "y.out", "segments": [], "param_digest": None}
    assert "nothing was measured" in findings.requeue(empty, {})[0]


def test_fast_mode_says_why_the_batch_job_is_not_submitted(tmp_path):
    from dltutor.checkpoint import batch
    job, why = batch.submit_requeue_or_say(tmp_path, wanted=False)
    assert job is None and why.startswith("not submitted: fast mode") and "test_checkpoint_slurm" in why
