"""Notebook 07's exercise: a file-sharded loader that reshuffles the file list every epoch.

The student writes `MyShards(files, rank, world_size, seed)`, an IterableDataset with
`set_epoch(epoch)` whose `__iter__` yields the samples of this rank's files, read through
`read_shard(path)`, in a script that ends with `run(MyShards)`. In the kernel, `check(path)`
writes SAMPLES tiny samples into FILES tar shards (`formats.write_shards`, ids 0 .. SAMPLES-1, the
last shard shorter) in a temporary folder, passes it in `$DLTUTOR_EXERCISE_SHARDS`, and launches the
script on 2 gloo ranks. Each rank (`run`) builds the loader, calls set_epoch(e) before each of
EPOCHS epochs, iterates it through a DataLoader and reports the sample ids it yielded beside what
`read_shard` recorded: which files it opened, in which order, and the ids it read from each.

The check (`judge`) then wants, in every epoch: every sample read exactly once over the ranks,
each file read whole by one rank (file-level sharding), the samples yielded to be the ones read
from the files, a file order that changes from epoch to epoch, and files that move between ranks.
"""
from __future__ import annotations

import os
import tempfile
import traceback
from pathlib import Path

from dltutor.core import course
from dltutor.grading import ranks
from dltutor.grading.verdict import from_problems, not_yet, wrong
from dltutor.io import formats, sharding

EXERCISE = "07-file-sharding"
NPROC, EPOCHS, SEED = 2, 3, 21
SAMPLES, PER_SHARD = 78, 8        # 10 files: 9 of 8 samples and one of 6
FOLDER_ENV = "DLTUTOR_EXERCISE_SHARDS"
SOLUTION = "07_io/solutions/file_shards.py"

_OPENED: list[dict] = []          # this rank's reads in the current epoch (read_shard notes them)


# ------------------------------------------------------------------ inside the launched ranks
def shard_files() -> list[Path]:
    """The exercise's shard files, sorted by name (the folder the check made)."""
    folder = os.environ.get(FOLDER_ENV)
    if not folder:
        raise RuntimeError(f"${FOLDER_ENV} is not set: the check "
                           "(dltutor.io.exercise_shards.check) makes the shards and sets it")
    return formats.files_of("shards", folder)


def read_shard(path):
    """Yield (image, label, sample id) of one shard file, front to back; the harness notes the file
    and every id read from it (the check compares that with what the loader yielded)."""
    record = {"file": Path(path).name, "ids": []}
    _OPENED.append(record)
    for image, label, sample_id in formats.shard_samples(path):
        record["ids"].append(sample_id)
        yield image, label, sample_id


def _sample_id(item) -> int:
    value = item[-1] if isinstance(item, (tuple, list)) else item
    return int(value)


def run(loader_cls, epochs: int = EPOCHS, seed: int = SEED) -> None:
    """The training loop: build the loader, set_epoch(e) and one pass per epoch, report each."""
    import torch.utils.data as tud

    from dltutor.core import dist
    with dist.session() as ctx:
        data = loader_cls(shard_files(), ctx.rank, ctx.world_size, seed=seed)
        for epoch in range(epochs):
            _OPENED.clear()
            try:
                data.set_epoch(epoch)
                got = [_sample_id(item) for item in tud.DataLoader(data, batch_size=None)]
            except NotImplementedError:
                raise                      # a TODO: the check says "not yet"
            except Exception as exc:
                dist.report(event="error", epoch=epoch, error="".join(
                    traceback.format_exception_only(type(exc), exc)).strip())
                raise
            dist.report(event="epoch", epoch=epoch, ids=got, opened=[dict(r) for r in _OPENED])


# ------------------------------------------------------------------ in the kernel
def make_shards(root) -> dict[str, list[int]]:
    """Write the exercise's shards under `root`; {file name: the ids read back from it}."""
    import numpy as np
    ids = np.arange(SAMPLES)
    images = np.repeat((ids % 256).astype(np.uint8), 28 * 28).reshape(SAMPLES, 28, 28)
    paths = formats.write_shards(root, images, ids % 10, PER_SHARD)
    return {p.name: [int(s[2]) for s in formats.shard_samples(p)] for p in paths}


def _span(ids) -> str:
    ids = sorted(ids)
    if ids and ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"ids {ids[0]}-{ids[-1]}"
    return "ids " + ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")


def _ranks(rs) -> str:
    return "rank " + str(rs[0]) if len(rs) == 1 else "ranks " + " and ".join(map(str, rs))


def _reads(r: int, e: int, rep: dict, files: dict) -> list[str]:
    """What rank r's epoch e yielded against what it read through read_shard, file by file."""
    out, read = [], [i for o in rep["opened"] for i in o["ids"]]
    for o in rep["opened"]:
        if o["file"] not in files:
            out.append(f"rank {r}, epoch {e}: opened {o['file']}, which is not one of the files")
        elif o["ids"] != files[o["file"]]:
            left = sorted(set(files[o["file"]]) - set(o["ids"]))
            out.append(f"rank {r}, epoch {e}: read {len(o['ids'])} of the {len(files[o['file']])}"
                       f" samples of {o['file']} (not {_span(left)}): read each file to its end")
    made_up = sorted(set(rep["ids"]) - set(read))
    if made_up:
        out.append(f"rank {r}, epoch {e}: yielded {_span(made_up)}, which it did not read from the "
                   "files: yield what ex.read_shard(path) gives")
    elif sorted(rep["ids"]) != sorted(read):
        dropped = sorted(set(read) - set(rep["ids"])) or sorted(read)
        out.append(f"rank {r}, epoch {e}: read {len(read)} samples from its files but yielded "
                   f"{len(rep['ids'])} (e.g. not {_span(dropped)} as often as read): file-level "
                   "sharding yields every sample of each of the rank's files, once")
    return out


def _coverage(e: int, by_rank: dict, files: dict) -> list[str]:
    """Which files of epoch e more than one read (and by whom), which no rank read."""
    out, opened = [], {f: [] for f in files}
    for r, rep in by_rank.items():
        for o in rep["opened"]:
            opened.setdefault(o["file"], []).append(r)
    cov = sharding.coverage([rep["ids"] for rep in by_rank.values()],
                            sum(len(ids) for ids in files.values()))   # ids 0 .. N-1
    twice = {f: rs for f, rs in opened.items() if len(rs) > 1 and f in files}
    never = [f for f, rs in opened.items() if not rs]
    for f, rs in list(twice.items())[:4]:
        out.append(f"epoch {e}: {f} ({_span(files[f])}) was read by {_ranks(rs)}")
    for f in never[:4]:
        out.append(f"epoch {e}: {f} ({_span(files[f])}) was read by no rank")
    if len(twice) > 4 or len(never) > 4:
        out.append(f"epoch {e}, in all: {len(twice)} files read by more than one rank, "
                   f"{len(never)} by none")
    if not out and not cov["exactly_once"]:
        if cov["repeated"]:
            out.append(f"epoch {e}: samples read more than once: {_span(cov['repeated'])}")
        if cov["missing"]:
            out.append(f"epoch {e}: samples read by no rank: {_span(cov['missing'])}")
    if twice and all(len(rep["opened"]) == len(files) for rep in by_rank.values()):
        out.append(f"every rank read all {len(files)} files: keep only this rank's share of the "
                   "shuffled list (every world_size-th file, starting at rank)")
    elif twice and never:
        out.append("the ranks split different orders: shuffle with the same seed on every rank "
                   "(the seed and the epoch, not the rank), so the shares fit together")
    return out


def judge(metrics: list[dict], files: dict, n: int = NPROC, epochs: int = EPOCHS
          ) -> tuple[list[str], str]:
    """(problems, summary) for the ranks' epoch reports against the shard files `files`."""
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return [f"rank {m['rank']} failed in epoch {m['epoch']}: {m['error']}" for m in errors], ""
    got = {(m["rank"], m["epoch"]): m for m in metrics if m.get("event") == "epoch"}
    absent = [f"rank {r} reported no epoch {e}" for r in range(n) for e in range(epochs)
              if (r, e) not in got]
    if absent:
        return absent[:4], ""
    problems, later = [], []
    for e in range(epochs):
        by_rank = {r: got[(r, e)] for r in range(n)}
        found = [p for r, rep in by_rank.items() for p in _reads(r, e, rep, files)]
        found += _coverage(e, by_rank, files)
        if found and not problems:
            problems = found           # the first epoch that went wrong, in full
        elif found:
            later.append((e, len(found)))
    if later:
        problems.append(f"also wrong in epoch {' and '.join(str(e) for e, _ in later)}: "
                        f"{sum(k for _, k in later)} more problems of the kinds above")
    if problems:
        return problems, ""
    order = {e: [[o["file"] for o in got[(r, e)]["opened"]] for r in range(n)]
             for e in range(epochs)}
    for e in range(1, epochs):
        if order[e] == order[e - 1]:
            problems.append(f"the same order in epochs {e - 1} and {e}: shuffle with a seed that "
                            "includes the epoch (set_epoch(epoch) is called before each epoch)")
    for r in range(n):
        if len({frozenset(order[e][r]) for e in range(epochs)}) == 1:
            problems.append(f"rank {r} read the same files in all {epochs} epochs "
                            f"({', '.join(order[0][r])}), only reordered: shuffle the whole file "
                            "list, then split it, so the files move between ranks")
    first = "; ".join(f"epoch {e}: rank 0 began with {order[e][0][0]}, rank 1 with "
                      f"{order[e][1][0]}" for e in range(epochs)) if n == 2 else ""
    return problems, (f"{epochs} epochs on {n} ranks: each of the {SAMPLES} samples read exactly "
                      f"once per epoch, each of the {len(files)} files whole by one rank, in a new "
                      f"order every epoch ({first})")


def work_file(name: str = "file_shards.py") -> Path:
    """Where the notebook writes the student's script (`%%writefile {path}`)."""
    return ranks.work_file(name)


def check(script=None, solution: bool = False, echo: bool = False, timeout: float = 120.0) -> bool:
    """Run `script` on 2 gloo ranks over fresh shard files and print the verdict."""
    if solution:
        script = course.lab(SOLUTION)
    script = script if script is not None else work_file()
    absent = ranks.missing(script)
    if absent:
        return not_yet(EXERCISE, absent, reference=solution).show()
    with tempfile.TemporaryDirectory(prefix="dltutor-shards-") as folder:
        files = make_shards(folder)
        ran = ranks.run_on_ranks(script, NPROC, env={FOLDER_ENV: folder}, timeout=timeout,
                                 echo=echo)
    if ran.unstarted:
        return not_yet(EXERCISE, "the loader still raises NotImplementedError: fill in the TODOs "
                       "of my_files and __iter__", reference=solution).show()
    reports = [m for m in ran.metrics if m.get("event") in ("epoch", "error")]
    if ran.failure and not reports:
        return wrong(EXERCISE, f"the script failed before its first epoch: {ran.failure}",
                     reference=solution).show()
    problems, summary = judge(reports, files)
    return from_problems(EXERCISE, problems, summary, reference=solution).show()
