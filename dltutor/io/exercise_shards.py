"""Notebook 07's exercise: a file-sharded loader that reshuffles the file list every epoch.

The student writes `MyShards(files, rank, world_size, seed)`, an IterableDataset with
`set_epoch(epoch)` whose `__iter__` yields the samples of this rank's files, read through
`read_shard(path)`, in a script that ends with `run(MyShards)`. In the kernel, `check(path)` writes
tiny tar shards (`formats.write_shards`, PER_SHARD samples a file, the last file shorter) into a
temporary folder, with the cases below and fresh seeds in `cases.json`, passes the folder in
`$DLTUTOR_EXERCISE_SHARDS` and launches the script on 2 gloo ranks. File counts that do not
divide by the ranks, so a loader that drops the remainder cannot pass:

    11 files on 2 ranks, seed a   3 epochs, then a new loader set to epoch 2 (a restarted job)
    11 files on 2 ranks, seed b   3 epochs (another seed must give other orders)
    10 files on 3 ranks, seed c   3 epochs  } 3 ranks inside the 2 processes: process p builds
     5 files on 3 ranks, seed d   3 epochs  } the loaders of the ranks r with r % 2 == p

In every pass each rank (`run`) builds or reuses its loader, calls set_epoch(e), iterates it
through a DataLoader and reports the sample ids it yielded beside what `read_shard` recorded: the
files it opened, in order, and the ids it read from each. `shards_judge.judge` decides.
"""
from __future__ import annotations

import inspect
import json
import os
import random
import tempfile
import traceback
from dataclasses import asdict
from pathlib import Path

from dltutor.core import course
from dltutor.grading import numbers, ranks
from dltutor.grading.verdict import from_problems, not_yet, wrong
from dltutor.io import formats
from dltutor.io.shards_judge import Case, judge

EXERCISE = "07-file-sharding"
NPROC, PER_SHARD = 2, 4
LAYOUT = ((11, 2, True), (11, 2, False), (10, 3, False), (5, 3, False))  # files, ranks, restart
FOLDER_ENV = "DLTUTOR_EXERCISE_SHARDS"
CASES_FILE = "cases.json"
SOLUTION = "07_io/solutions/file_shards.py"

_OPENED: list[dict] = []          # this rank's reads in the current pass (read_shard notes them)


# ------------------------------------------------------------------ inside the launched ranks
def load_cases() -> tuple[Path, list[Case]]:
    """The folder the check made and its cases (cases.json)."""
    folder = os.environ.get(FOLDER_ENV)
    if not folder:
        raise RuntimeError(f"${FOLDER_ENV} is not set: the check "
                           "(dltutor.io.exercise_shards.check) makes the shards and sets it")
    spec = json.loads((Path(folder) / CASES_FILE).read_text())
    return Path(folder), [Case(**c) for c in spec]


def read_shard(path):
    """Yield (image, label, sample id) of one shard file, front to back; the harness notes the file
    and every id read from it (the check compares that with what the loader yielded)."""
    record = {"file": Path(path).name, "ids": []}
    _OPENED.append(record)
    for image, label, sample_id in formats.shard_samples(path):
        record["ids"].append(sample_id)
        yield image, label, sample_id


def _sample_id(item) -> int | None:
    """The sample id of an (image, label, id) item, or None for anything else."""
    if isinstance(item, (tuple, list)) and len(item) == 3:
        return numbers.as_int(item[2])
    return None


def _error(exc: Exception, loader_cls) -> str:
    """The exception, and the last line of the student's script it went through."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    try:
        script = inspect.getsourcefile(loader_cls)
    except TypeError:
        return text
    mine = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == script]
    return text + (f" (line {mine[-1].lineno}, in {mine[-1].name}: {mine[-1].line})"
                   if mine else "")


def play(loader_cls, rank: int, nproc: int, tag: str | None = None) -> None:
    """Every pass of every case for the loader ranks this process plays (r % nproc == rank)."""
    root, cases = load_cases()
    for case in cases:
        files = formats.files_of("shards", root / case.folder)
        for loader_rank in range(rank, case.world_size, nproc):
            _play_case(loader_cls, case, files, loader_rank, tag)


def _play_case(loader_cls, case: Case, files: list, loader_rank: int, tag: str | None) -> None:
    import torch.utils.data as tud

    from dltutor.core import dist
    data = None
    for epoch, restart in case.passes():
        where = dict(case=case.name, loader_rank=loader_rank, epoch=epoch, restart=restart,
                     **({"tag": tag} if tag else {}))
        _OPENED.clear()
        try:
            if data is None or restart:
                data = loader_cls(list(files), loader_rank, case.world_size, seed=case.seed)
            data.set_epoch(epoch)
            got = [_sample_id(item) for item in tud.DataLoader(data, batch_size=None)]
        except NotImplementedError:
            raise                      # a TODO: the check says "not yet"
        except Exception as exc:
            dist.report(event="error", error=_error(exc, loader_cls), **where)
            raise
        dist.report(event="epoch", ids=got, opened=[dict(r) for r in _OPENED], **where)


def run(loader_cls) -> None:
    """The training loop of the student's script: every case's passes, each reported."""
    from dltutor.core import dist
    with dist.session() as ctx:
        play(loader_cls, ctx.rank, ctx.world_size)


# ------------------------------------------------------------------ in the kernel
def make_shards(root, n_files: int) -> dict[str, list[int]]:
    """Write `n_files` shards under `root` (the last 2 samples short); {file name: ids in it}."""
    import numpy as np
    samples = n_files * PER_SHARD - 2
    ids = np.arange(samples)
    images = np.repeat((ids % 256).astype(np.uint8), 28 * 28).reshape(samples, 28, 28)
    paths = formats.write_shards(root, images, ids % 10, PER_SHARD)
    return {p.name: [int(s[2]) for s in formats.shard_samples(p)] for p in paths}


def prepare(root, seeds=None) -> tuple[list[Case], dict]:
    """The cases (fresh distinct seeds unless given) and their shards under `root`, and
    cases.json for the ranks; returns (cases, {case.folder: {file name: ids}})."""
    seeds = seeds or random.SystemRandom().sample(range(1, 10 ** 6), len(LAYOUT))
    cases = [Case(n, w, int(s), restart) for (n, w, restart), s in zip(LAYOUT, seeds)]
    files = {c.folder: make_shards(Path(root) / c.folder, c.files)
             for c in {c.folder: c for c in cases}.values()}
    (Path(root) / CASES_FILE).write_text(json.dumps([asdict(c) for c in cases]))
    return cases, files


def work_file(name: str = "file_shards.py") -> Path:
    """Where the notebook writes the student's script (`%%writefile {path}`)."""
    return ranks.work_file(name)


def check(script=None, solution: bool = False, echo: bool = False, timeout: float = 120.0) -> bool:
    """Run `script` on 2 gloo ranks over fresh shard files and seeds and print the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    absent = ranks.missing(script)
    if absent:
        return not_yet(EXERCISE, absent, reference=solution).show()
    with tempfile.TemporaryDirectory(prefix="dltutor-shards-") as folder:
        cases, files = prepare(folder)
        ran = ranks.run_on_ranks(script, NPROC, env={FOLDER_ENV: folder}, timeout=timeout,
                                 echo=echo)
    if ran.unstarted:
        return not_yet(EXERCISE, "the loader still raises NotImplementedError: fill in the TODOs "
                       "of my_files and __iter__", reference=solution).show()
    reports = [m for m in ran.metrics if m.get("event") in ("epoch", "error")]
    if ran.failure and not any(m["event"] == "error" for m in reports):
        return wrong(EXERCISE, f"the script failed outside the loader's passes: {ran.failure}",
                     reference=solution).show()
    problems, summary = judge(reports, cases, files)
    return from_problems(EXERCISE, problems, summary, reference=solution).show()
