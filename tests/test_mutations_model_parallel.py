"""Mutation tests of notebook 06's three exercise checks: every answer in tests/answers/06-*/
judged by the real check, wrong ones named, right ones (written unlike the solution) solved.

The launched exercises' answers (06-tensor-parallel, 06-pipeline) are judged all in one launch of
2 ranks per exercise (`exercise_batch.judge_scripts`: each answer in a process group of its own,
through the exercise's own `attempt` and `judge`), on seeds whose sizes differ from the
notebook's; a right answer is judged on two seeds. 06-placement's run in the kernel, on the
check's shapes plus those drawn for three seeds.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from dltutor.model_parallel import exercise_batch, exercise_place
from mutants import answers

LAUNCHED = ("06-tensor-parallel", "06-pipeline")
SEEDS = (3, 4, 5, 7, 9, 11, 12, 19, 24)        # two sizes for each right answer, spread out
slow = pytest.mark.slow


NOTEBOOK = (Path(__file__).resolve().parents[1] / "course" / "notebooks"
            / "06_model_parallelism.ipynb")
SKELETON = {"06-tensor-parallel": "MY_TP", "06-pipeline": "MY_PP"}


def skeleton(exercise: str) -> str:
    """The notebook's `%%writefile {MY_..}` cell: the script as handed out."""
    head = f"%%writefile {{{SKELETON[exercise]}}}\n"
    cells = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells
             if c.cell_type == "code" and c.source.startswith(head)]
    assert len(cells) == 1, f"one cell starting {head!r} in {NOTEBOOK.name}"
    return cells[0][len(head):] + "\n"


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """{answer name: [Verdict, ...]} of an exercise, one launch per exercise, on first use; the
    notebook's skeleton ("skeleton") and a script that does not load ("unloadable") too."""
    cache = {}

    def of(exercise: str, name: str) -> list:
        if exercise not in cache:
            folder = tmp_path_factory.mktemp(exercise)
            jobs = [(a.name, a.write(folder / f"{a.name}.py"), seed)
                    for i, a in enumerate(answers(exercise))
                    for seed in (SEEDS[i % len(SEEDS)], SEEDS[(i + 4) % len(SEEDS)])
                    [: 2 if a.expect == "solved" else 1]]
            for key, text in (("skeleton", skeleton(exercise)), ("unloadable", "def (:\n")):
                (folder / f"{key}.py").write_text(text)
                jobs.append((key, folder / f"{key}.py", SEEDS[0]))
            jobs.append(("missing", folder / "never_written.py", SEEDS[0]))
            got = exercise_batch.judge_scripts(exercise, [p for _, p, _ in jobs],
                                               seeds=[s for _, _, s in jobs])
            cache[exercise] = {}
            for (key, _, _), v in zip(jobs, got):
                cache[exercise].setdefault(key, []).append(v)
        return cache[exercise][name]
    return of


@slow
@pytest.mark.parametrize("exercise,answer", [(e, a) for e in LAUNCHED for a in answers(e)],
                         ids=lambda v: v if isinstance(v, str) else v.name)
def test_launched_answer_is_judged_as_expected(verdicts, exercise, answer):
    for v in verdicts(exercise, answer.name):
        assert v.status == answer.expect, f"{answer.path.name} ({answer.why}):\n{v.text()}"
        if answer.expect == "wrong":
            answer.assert_named(v.message)


@pytest.mark.parametrize("answer", answers("06-placement"), ids=str)
def test_placement_answer_is_judged_as_expected(answer):
    scope = {}
    exec(compile(answer.source(), str(answer.path), "exec"), scope)
    for seed in (0, 1, 2):
        v = exercise_place.verdict(scope["place"], seed)
        assert v.status == answer.expect, f"{answer.path.name} ({answer.why}):\n{v.text()}"
        if answer.expect == "wrong":
            answer.assert_named(v.message)


@slow
@pytest.mark.parametrize("exercise", LAUNCHED)
def test_batch_says_not_yet_to_the_skeleton_and_a_missing_file_wrong_to_a_broken_one(verdicts,
                                                                                     exercise):
    [v] = verdicts(exercise, "skeleton")
    assert v.status == "not yet" and "NotImplementedError" in v.message, v.text()
    [v] = verdicts(exercise, "unloadable")
    assert v.status == "wrong" and "the script did not load: SyntaxError" in v.message, v.text()
    [v] = verdicts(exercise, "missing")
    assert v.status == "not yet" and "there is no script at" in v.message, v.text()
