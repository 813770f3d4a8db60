"""Mutation tests of notebook 08's two checks: the answers in tests/answers/08-diagnose/ and
tests/answers/08-fix-hang/, each judged by the real check.

08-diagnose: each answer is a strategy `answer(run) -> {"rank", "cause"}`, judged over one broken
run of each fault (launched once for the module); a wrong one must be refused on some run with a
message naming its claim, a right one solved on every run. The same runs show that nothing a
student can print of them names the fault. 08-fix-hang: each answer is a script, run by the check
on 2 gloo ranks over its 4 cases (wrong answers with a 4 s group timeout, so a hang ends soon).
"""
from __future__ import annotations

import importlib.util
import pickle
import types

import pytest

from dltutor.core import course
from dltutor.debug import exercise_diagnose as exd
from dltutor.debug import exercise_hang as exh
from mutants import answers

pytestmark = pytest.mark.slow
VARIANTS = [("skip", 1), ("kill", 1), ("nan", 1), ("straggler", 1), ("outside_ddp", 0),
            ("random_op", 1)]
FAULT_WORDS = ("skip", "straggler", "outside", "random_op", "kill", "fault", "divergence")


def load(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def solution():
    spec = importlib.util.spec_from_file_location("diagnose_answer", course.lab(exd.SOLUTION))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def runs():
    """One broken run per variant (a launch each), and the log folders they left (none)."""
    logs = []
    real = exd.run_fault

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        logs.append(out.log_dir)
        return out
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(exd, "run_fault", recording)
        made = {v: exd._run_variant(*v) for v in VARIANTS}
    assert logs and not any(p.exists() for p in logs), "a mystery run's logs (they name the fault)"
    return made


def judged(capsys, strategy, runs) -> list[tuple]:
    """(variant, ok, message) of `strategy` on every run, each run's tries reset first."""
    out = []
    for v, run in runs.items():
        exd._RUNS[run.token]["wrong"] = 0
        ok = exd.check(strategy(run), run)
        out.append((v, ok, capsys.readouterr().out))
    return out


# ------------------------------------------------------------------ 08-diagnose
def test_each_run_is_read_as_what_it_did_and_the_solution_passes(runs, capsys):
    for (fault, rank), run in runs.items():
        truth = {"rank": rank, "cause": exd._FAULTS[fault]}
        assert exd._what_happened(run) == truth, (fault, rank)
        assert solution().answer(run) == truth, (fault, rank)
        assert exd.check(truth, run, reference=True), capsys.readouterr().out


@pytest.mark.parametrize("answer", answers("08-diagnose"), ids=str)
def test_diagnosis_answers(answer, runs, capsys):
    strategy = load(answer.source(), answer.name).answer
    failed = [(v, msg) for v, ok, msg in judged(capsys, strategy, runs) if not ok]
    if answer.expect == "solved":
        assert not failed, f"{answer.path.name} ({answer.why}) refused: {failed}"
        return
    assert failed, f"{answer.path.name} ({answer.why}) was solved on every run"
    answer.assert_named(" ".join(msg for _, msg in failed))
    for v, msg in failed:          # a wrong verdict never names a true cause it did not claim
        if strategy(runs[v])["cause"] != exd._FAULTS[v[0]]:
            assert exd._FAULTS[v[0]] not in msg, msg


def test_nothing_printable_of_a_run_names_its_fault(runs):
    assert not hasattr(exd, "variant") and not hasattr(exd, "VARIANTS")
    for (fault, _), run in runs.items():
        assert not hasattr(run, "__dict__") and not hasattr(run, "fault")
        shown = " ".join([repr(run), str(run), run.token, str(run.failure), str(run.blamed),
                          str(run.caught), str(run.steps()), " ".join(dir(run))]).lower()
        assert not any(w in shown for w in FAULT_WORDS), shown
        assert fault.encode() not in pickle.dumps(run.steps())


# ------------------------------------------------------------------ 08-fix-hang
@pytest.mark.parametrize("answer", answers("08-fix-hang"), ids=str)
def test_repair_answers(answer, tmp_path, capsys):
    script = answer.write(tmp_path / f"{answer.name}.py")
    # a hang ends after the group's timeout: short for the wrong answers, the notebook's otherwise
    seconds = 4 if answer.expect == "wrong" else exh.DIST_TIMEOUT
    ok = exh.check(script, dist_timeout=seconds)
    out = capsys.readouterr().out
    if answer.expect == "solved":
        assert ok, f"{answer.path.name} ({answer.why}) refused:\n{out}"
        assert "every rank finished all 4 cases" in out
        return
    assert not ok and out.startswith("wrong:"), f"{answer.path.name} ({answer.why}):\n{out}"
    answer.assert_named(out)
