"""Notebook 02's Exercise 1 (dltutor.ddp.scaling_quiz) and notebook 03's efficiency exercise
(dltutor.horovod.runs.check_efficiency): wrong answers get one plain line naming the slip (no
traceback, never the answer nor its formula); right answers, numpy scalars included, pass."""
from __future__ import annotations

import numpy as np
import pytest

from dltutor.ddp import scaling_quiz as quiz
from dltutor.horovod import runs

EB, LR, WS = 1024, 0.4, 6255          # the right answers, worked out by hand (4 x 4 x 64 ...)
# what a wrong verdict must never print: the answers and the formulas of the old check
SECRETS = ("1024", "0.4", "6255", "1251", "effective_batch(", "scaled_lr(", "1_281_167 //",
           "// eb", "x number of ranks", "global batch / 256")


def judged(capsys, *answers) -> tuple[bool, str]:
    ok = quiz.check_scaling_exercise(*answers)
    return ok, capsys.readouterr().out


@pytest.mark.parametrize("answers", [(EB, LR, WS), (np.int64(EB), np.float64(LR), np.int64(WS)),
                                     (16 * 64, np.float32(0.4), np.array([WS])), (EB, 2 / 5, WS)])
def test_scaling_quiz_accepts_right_answers_as_any_number(capsys, answers):
    ok, out = judged(capsys, *answers)
    assert ok is True and out.strip() == "All three are right."


@pytest.mark.parametrize("answers, names", [
    ((64, LR, WS), r"effective batch: that is one rank's batch"),
    ((256, LR, WS), r"effective batch: count every rank of the job, on every node"),
    ((1000, LR, WS), r"effective batch: not the number of images one optimizer step sees"),
    ((1024.0, LR, WS), r"effective batch: float 1024.0: a batch is a whole number"),
    ((EB, 0.1, WS), r"scaled LR: that is the base LR, unscaled"),
    ((EB, 0.025, WS), r"scaled LR: the ratio is upside down"),
    ((EB, 0.2, WS), r"scaled LR: that is the square-root rule"),
    ((EB, 1.6, WS), r"scaled LR: scaled by the number of ranks"),
    ((EB, "0.4", WS), r"scaled LR: str '0.4': not a number"),
    ((EB, LR, 1251), r"warm-up steps: that is one epoch's steps"),
    ((EB, LR, 6256), r"warm-up steps: close, but rounded at the wrong place"),
    ((EB, LR, 6255.7), r"warm-up steps: float 6255.7: a step count is a whole number"),
    ((EB, LR, 5 * 1_281_167), r"warm-up steps: one step takes a whole global batch"),
    ((EB, LR, 7000), r"warm-up steps: not the number of optimizer steps"),
    ((256, 0.1, 25_020), r"(?s)effective batch: count every rank.*\n.*scaled LR: the rule is applied "
                         r"right, but to a wrong effective batch.*counted right, but from a "
                         r"wrong effective batch"),
])
def test_scaling_quiz_names_the_slip_never_the_answer(capsys, answers, names):
    ok, out = judged(capsys, *answers)
    assert ok is False
    assert "Traceback" not in out and all(line.startswith("Not yet: ") for line in out.splitlines())
    assert len(out.splitlines()) == sum(type(a) is not type(r) or a != r
                                  for a, r in zip(answers, (EB, LR, WS)))
    import re
    assert re.search(names, out), out
    shown = out.replace(repr(answers[0]), "").replace(repr(answers[1]), "").replace(
        repr(answers[2]), "")
    leaked = [s for s in SECRETS if s in shown]
    assert not leaked, f"the verdict gives away {leaked}: {out}"


def test_scaling_quiz_unanswered(capsys):
    ok, out = judged(capsys, None, LR, WS)
    assert ok is False and out.startswith("Not answered yet")


ROWS = [{"workers": 1, "engine": "horovod", "total_img_sec": 10.0, "run": "x1"},
        {"workers": 2, "engine": "horovod", "total_img_sec": 18.0, "run": "horovod x2"},
        {"workers": 2, "engine": "ddp", "total_img_sec": 17.0, "run": "ddp x2"}]


@pytest.mark.parametrize("fn", [lambda t1, tn, n: tn / t1 / n,
                                lambda t1, tn, n: np.float64(tn) / (np.float64(t1) * n),
                                lambda t1, tn, n: np.array([tn / (n * t1)], dtype=np.float32)[0]])
def test_efficiency_check_accepts_right_functions(capsys, fn):
    assert runs.check_efficiency(fn, ROWS) is True
    out = capsys.readouterr().out
    assert "Right on all" in out and "0.968" in out and "horovod x2: 0.900" in out


@pytest.mark.parametrize("fn, names", [
    (lambda t1, tn, n: tn / t1, r"that is the speedup, not the scaling efficiency"),
    (lambda t1, tn, n: t1 * n / tn, r"the ratio is upside down"),
    (lambda t1, tn, n: t1 / tn, r"the ratio is upside down"),
    (lambda t1, tn, n: 100 * tn / t1 / n, r"that is a percentage"),
    (lambda t1, tn, n: tn / t1 / n / n, r"divided by the number of workers once too often"),
    (lambda t1, tn, n: tn / n, r"the rate per worker of the n-worker run"),
    (lambda t1, tn, n: 0.968, r"not the scaling efficiency"),                # typed in
    (lambda t1, tn, n: tn / (2 * t1), r"a case you have not seen.*not the scaling efficiency"),
    (lambda t1, tn, n: None, r"returned NoneType None: return the efficiency as a number"),
    (lambda t1, tn, n: t1 / 0, r"raised ZeroDivisionError"),
])
def test_efficiency_check_names_the_slip_never_the_answer(capsys, fn, names):
    import re
    assert runs.check_efficiency(fn, ROWS) is False      # a printed verdict, no AssertionError
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and out.startswith("Not yet (") and re.search(names, out), out
    for secret in ("0.968", "0.967", "650.3 / 336.0", "/ 2 =", "1.935", "0.900", "0.833"):
        assert secret not in out, f"the verdict gives away {secret!r}: {out}"


def test_efficiency_check_needs_a_one_worker_run():
    with pytest.raises(ValueError, match="1-worker run"):
        runs.check_efficiency(lambda t1, tn, n: tn / t1 / n, ROWS[1:])


# what a "not yet"/"wrong" hint of the DDP and Horovod exercises says is missing, never the line
CODE = ("init_process_group", "DistributedSampler(", "num_replicas=", "DDP(model)", "rank == 0",
        "hvd.init()", "hvd.DistributedOptimizer", "named_parameters", "broadcast_parameters(",
        "broadcast_optimizer_state(", "root_rank", "hvd.Sum", "hvd.Average", "destroy_process_group",
        "model.module.state_dict", "set_epoch(epoch)", "hvd.rank()", "`if ")


@pytest.mark.parametrize("exercise", ["ddp", "horovod"])
def test_exercise_hints_say_what_is_missing_not_the_code(exercise):
    from dltutor.ddp import exercise_check
    from dltutor.horovod import exercise as hvd_exercise
    hints = exercise_check.HINTS if exercise == "ddp" else hvd_exercise.HINTS
    given = {name: [c for c in CODE if c in text] for name, text in hints.items()}
    assert not any(given.values()), f"hints that hand out code: { {k: v for k, v in given.items() if v} }"
