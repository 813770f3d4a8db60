"""Notebook 10's exercise (10-resume): an app state for DCP, checked by killing or stopping lab 10's
training on 2 gloo ranks at an unseen step and resuming it in a second launch.

The check's real path here: the course's solution passes a SIGKILL and a stop; a wrong answer is
named through a real kill; the notebook's own unsolved skeleton gets "not yet"; a missing file too.
The wrong and right answers (tests/answers/10-resume/) are judged in one launch by
tests/test_mutations_checkpoint.py. Plus the plan: every step the check may end a run at leaves a
checkpoint past the first epoch and inside an epoch, so a resume without the epoch or the offset
always shows.
"""
from __future__ import annotations


import pytest

from dltutor.checkpoint import exercise_resume
from mutants import answers
from exercise_files import cell_starting, verdict

NOTEBOOK = "10_checkpoints_and_restarts.ipynb"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["kill", "stop"])
def test_resume_solution_passes_a_kill_and_a_stop(capsys, mode):
    out = verdict(capsys, exercise_resume.check(solution=True, mode=mode), "passed")
    assert ("SIGKILLed after step" if mode == "kill" else "saved step") in out
    assert "equal the uninterrupted run's at step" in out and "are bit-identical" in out


@pytest.mark.slow
def test_resume_without_the_sampler_epoch_is_named_after_a_real_kill(capsys, tmp_path):
    wrong = next(a for a in answers("10-resume") if a.name == "forgets_the_sampler_epoch")
    ok = exercise_resume.check(wrong.write(tmp_path / "app_state.py"), mode="kill")
    out = verdict(capsys, ok, "wrong")
    assert "SIGKILLed after step" in out
    wrong.assert_named(out)


@pytest.mark.slow
def test_resume_unsolved_skeleton_says_not_yet(capsys, tmp_path):
    head = "%%writefile {MY_RESUME}\n"
    script = tmp_path / "app_state.py"
    script.write_text(cell_starting(NOTEBOOK, head)[len(head):] + "\n")
    out = verdict(capsys, exercise_resume.check(script), "not yet")
    assert "MyAppState still raises NotImplementedError" in out


def test_resume_missing_script_says_not_yet(capsys, tmp_path):
    out = verdict(capsys, exercise_resume.check(tmp_path / "none.py"), "not yet")
    assert "run the %%writefile cell above first" in out


@pytest.mark.parametrize("mode", ["kill", "stop"])
def test_every_stop_step_resumes_past_the_first_epoch_and_inside_an_epoch(mode):
    per, every = exercise_resume.batches_per_epoch(), exercise_resume.SAVE_EVERY
    steps = exercise_resume.stop_steps(mode)
    assert len(steps) >= 4, steps          # enough for the step to be unseen
    for s in steps:
        resumed = s - s % every if mode == "kill" else s
        assert resumed > per and resumed % per, (mode, s, resumed)


def test_each_attempt_draws_its_own_seed_step_and_ending(tmp_path):
    plans = [exercise_resume.make_plan(tmp_path) for _ in range(30)]
    assert len({p["seed"] for p in plans}) == 30
    assert {p["mode"] for p in plans} == {"kill", "stop"} and {p["rank"] for p in plans} == {0, 1}
    assert all(p["step"] in exercise_resume.stop_steps(p["mode"]) for p in plans)
    assert len({p["step"] for p in plans}) > 3
