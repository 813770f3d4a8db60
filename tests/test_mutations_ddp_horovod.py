"""Mutation tests of notebooks 02 and 03's exercise checks (DDP and Horovod lines of a script).

Every answer in tests/answers/02-ddp/ and tests/answers/03-horovod/ is judged by the checks' own
judge (`dltutor.ddp.exercise_check.verdict`): a wrong one must be "wrong" with a message naming
its mistake, a right one (written differently from the course's solution) "solved".

To keep the time small, the answers of one exercise run one after the other in ONE launch of 2
ranks (`RUNNER`: each answer's records follow an "answer" record; the process group or Horovod
job an answer leaves is closed before the next), on a data set size drawn as the check draws it
(never a multiple of the ranks: answers that drop the remainder show). An answer that crashes on one rank cannot share
a launch (its peer would wait): those (`crash_*`) go through the whole check, one launch each, and
their verdict must lead with the crashing rank's own error, not its peer's lost connection.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from dltutor.ddp import exercise as ex
from dltutor.ddp import exercise_check
from dltutor.horovod import exercise as hvd_exercise
from dltutor.launch.run import launch
from mutants import answers

pytestmark = pytest.mark.slow

EXERCISES = {  # id: (launch back end, extra args, hints, teardown judged, the check)
    "02-ddp": ("local", [], exercise_check.HINTS, True, exercise_check.check),
    "03-horovod": ("horovod", ["--no-cuda"], hvd_exercise.HINTS, False, hvd_exercise.check),
}

RUNNER = '''
import os, runpy, sys, time
from dltutor.core import dist
from dltutor.ddp import exercise as ex

engine, folder = sys.argv[1], sys.argv[2]
names = [n for n in sys.argv[3:] if not n.startswith("--")]     # --no-cuda: for horovodrun


def leave():
    """Close the process group the answer left open: the next answer starts as a fresh script."""
    import torch.distributed as tdist
    if tdist.is_initialized():
        tdist.destroy_process_group()


if engine == "horovod":     # Horovod's gloo job does not start again reliably once shut down:
    import horovod.torch as hvd     # it stays open for all the answers (each calls hvd.init()),
    hvd.shutdown = lambda: None     # and is closed when the ranks exit


def fresh_port(name):
    """A new rendezvous port for each answer (a group re-made on the old one may hang): rank 0
    picks a free one and leaves it in a file the other ranks (on this machine) wait for."""
    path = os.path.join(folder, name + ".port")
    if dist.detect()["rank"] == 0:
        with open(path + ".tmp", "w") as f:
            f.write(str(dist.free_port()))
        os.replace(path + ".tmp", path)
    for _ in range(600):
        if os.path.exists(path):
            os.environ["MASTER_PORT"] = open(path).read()
            return
        time.sleep(0.05)
    raise TimeoutError(f"rank 0 never chose the port for {name}")


for name in names:
    ex._RECORD.update(init=None, data=None)
    if engine != "horovod":
        fresh_port(name)
    os.environ[ex.CHECKPOINT_ENV] = os.path.join(folder, name + ".pt")
    dist.report(event="answer", name=name)
    runpy.run_path(os.path.join(folder, name + ".py"), run_name="__main__")
    leave()
'''


def shared(exercise: str) -> list:
    found = [a for a in answers(exercise) if not a.name.startswith("crash_")]
    if exercise == "03-horovod":     # one Horovod job serves them all (RUNNER): each must join it
        assert all("hvd.init()" in a.source() for a in found), "a Horovod answer without hvd.init()"
    return found


def split(metrics: list[dict]) -> dict[str, list[dict]]:
    """Each answer's records (every rank's), from the "answer" records that open them."""
    out, current = {}, {}
    for m in metrics:           # in rank order, each rank's records in the order it wrote them
        if m.get("event") == "answer":
            current[m["rank"]] = out.setdefault(m["name"], [])
        else:
            current[m["rank"]].append(m)
    return out


@pytest.fixture(scope="module", params=list(EXERCISES))
def judged(request, tmp_path_factory):
    """(exercise, samples, {answer name: Verdict}) for every shared answer of the exercise, one
    launch on a data set of `samples` samples."""
    exercise = request.param
    backend, args, hints, teardown, _ = EXERCISES[exercise]
    folder = tmp_path_factory.mktemp(exercise)
    samples = exercise_check.draw_samples()
    names = [a.write(folder / f"{a.name}.py").stem for a in shared(exercise)]
    runner = folder / "run_answers.py"
    runner.write_text(RUNNER)
    result = launch(runner, nproc=2, backend=backend, args=[backend, str(folder), *names, *args],
                    env={"CUDA_VISIBLE_DEVICES": "", "DLTUTOR_DIST_TIMEOUT": "30",
                         ex.SAMPLES_ENV: str(samples)}, threads=1,
                    timeout=240, echo=False)
    records = split(result.metrics)
    assert sorted(records) == sorted(names), f"answers that never ran: {set(names) - set(records)}"
    return exercise, samples, {n: exercise_check.verdict(records[n], exercise, hints, teardown,
                                                         samples=samples) for n in names}


def test_every_answer_is_judged_as_expected(judged):
    exercise, samples, verdicts = judged
    failures = []
    for a in shared(exercise):
        v = verdicts[a.name]
        if v.status != a.expect:
            failures.append(f"{a.name} ({a.why}): expected {a.expect}, got {v.text()}")
        elif a.expect == "wrong" and not re.search(a.names, v.message, re.I | re.S):
            failures.append(f"{a.name} ({a.why}): the message does not match /{a.names}/: "
                            f"{v.message}")
    assert not failures, f"on {samples} samples:\n" + "\n".join(failures)


@pytest.mark.parametrize("exercise", list(EXERCISES))
def test_a_crash_on_one_rank_leads_with_that_rank_s_error(exercise, capsys, tmp_path):
    crashes = [a for a in answers(exercise) if a.name.startswith("crash_")]
    assert crashes, f"tests/answers/{exercise}/ holds no crash_* answer"
    for a in crashes:
        ok = EXERCISES[exercise][4](a.write(tmp_path / f"{a.name}.py"), echo=False)
        out = capsys.readouterr().out
        assert not ok and out.startswith("wrong:"), out
        first = out.splitlines()[0]
        a.assert_named(first)           # the cause, on the first line
        assert not re.search(r"reset by peer|closed by peer|lost its peer", first, re.I), first


def test_every_size_a_check_draws_leaves_a_remainder_and_a_partial_batch():
    import random
    sizes = {exercise_check.draw_samples(random.Random(seed)) for seed in range(300)}
    assert len(sizes) >= 10, sizes                  # fresh per check, not one size
    for n in sizes:                                 # 2 ranks, batches of ex.PER_RANK_BATCH
        assert n % 2 and (n // 2) % ex.PER_RANK_BATCH and ((n + 1) // 2) % ex.PER_RANK_BATCH, n


def test_the_samples_no_rank_read_are_named_and_padding_is_fine():
    from torch.utils.data import DistributedSampler

    from dltutor.ddp.exercise_judge import data_problems
    n = 45

    def finals(**kw):
        out = []
        for rank in range(2):
            sampler, seen = DistributedSampler(range(n), num_replicas=2, rank=rank, **kw), []
            for epoch in range(ex.EPOCHS):
                sampler.set_epoch(epoch)
                seen += list(sampler)
            out.append({"rank": rank, "seen": seen})
        return out

    assert data_problems(finals(), n, exercise_check.HINTS) == []    # one repeat: the padding
    dropped = finals(drop_last=True)
    first_epoch = [set(f["seen"][:n // 2]) for f in dropped]
    (missing,) = set(range(n)) - first_epoch[0] - first_epoch[1]
    (problem,) = data_problems(dropped, n, exercise_check.HINTS)
    assert f"1 of the {n} samples was read by no rank (sample {missing} of" in problem, problem
    assert "drop_last=True" in problem and "remainder of 45 / 2 was dropped" in problem, problem
