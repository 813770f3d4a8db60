"""Judge many answers of notebook 06's launched exercises in ONE launch of 2 ranks.

    verdicts = judge_scripts(exercise_pp.EXERCISE, [path, ...], seeds=[...])
    [v.status for v in verdicts]       # one Verdict per script, in order (not shown)

For an instructor who grades a folder of submissions, and for the course's mutation tests:
starting the ranks costs seconds, one answer's run a fraction of one. Each launched rank (this
file, run as a script) loads each answer as a module (its `run(...)` line hands the function over
instead of launching anything) and runs it with the exercise's own `attempt`, in a process group
of its own: a fresh gloo group on a prefix of the launch's store, bounded by ANSWER_TIMEOUT
seconds, so nothing an answer leaves in flight reaches the next, and a hanging answer costs that
long. The kernel judges each answer with the exercise's own `judge`, as `check` does; an answer
whose TODO still raises NotImplementedError is "not yet".
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import time
from datetime import timedelta
from pathlib import Path

from dltutor.model_parallel import exercise_pp, exercise_tp

# exercise id -> its check module (the ids live in the checks: one module names each exercise)
EXERCISES = {m.EXERCISE: m.__name__ for m in (exercise_tp, exercise_pp)}
ANSWERS_ENV = "DLTUTOR_ANSWERS"
EXERCISE_ENV = "DLTUTOR_ANSWERS_EXERCISE"
ANSWER_TIMEOUT = 8


# ------------------------------------------------------------------ inside the launched ranks
def load(path, exercise, index: int):
    """The answer's function: its script run as a module, its `run(fn)` handing `fn` over."""
    handed, real_run = [], exercise.run
    exercise.run = handed.append
    try:
        spec = importlib.util.spec_from_file_location(f"dltutor_answer_{index}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        exercise.run = real_run
    fn = getattr(module, exercise.FUNCTION, None) or (handed[0] if handed else None)
    if not callable(fn):
        raise RuntimeError(f"the script defines no function {exercise.FUNCTION}")
    return fn


def fresh_group(store, name: str, rank: int, world: int) -> None:
    """Replace the default process group by a new gloo group on `store`, prefixed `name`. Every
    rank is done with the old group before any leaves it (else a rank still receiving, or
    still connecting, loses its peer), and with the new one connected before any goes on."""
    import torch.distributed as dist
    arrived(store, name + "leave", world)
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.PrefixStore(name, store), rank=rank,
                            world_size=world, timeout=timedelta(seconds=ANSWER_TIMEOUT))
    dist.barrier()


def arrived(store, key: str, world: int) -> None:
    """Wait (through the store, not the group) until all `world` ranks have reached `key`."""
    store.add(key, 1)
    deadline = time.monotonic() + 3 * ANSWER_TIMEOUT
    while store.add(key, 0) < world:
        if time.monotonic() > deadline:
            raise RuntimeError(f"a rank never reached {key!r}: it died or hangs outside the "
                               "process group")
        time.sleep(0.01)


def main() -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from dltutor.core import dist as _dist
    exercise = importlib.import_module(EXERCISES[os.environ[EXERCISE_ENV]])
    items = json.loads(os.environ[ANSWERS_ENV])
    ctx = _dist.init(timeout=ANSWER_TIMEOUT)
    store = c10d._get_default_store()
    os.environ[_dist.TIMEOUT_ENV] = str(ANSWER_TIMEOUT)
    for i, item in enumerate(items):
        fresh_group(store, f"answer{i}/", ctx.rank, ctx.world_size)
        os.environ[exercise.SEED_ENV] = str(item["seed"])
        try:
            fn = load(item["path"], exercise, i)
        except Exception as exc:  # noqa: BLE001 - the student's script: report it, go on
            record = {"event": "error", "t": time.time(), "phase": "load",
                      "error": f"the script did not load: {type(exc).__name__}: {exc}"}
        else:
            record, _ = exercise.attempt(fn, ctx.rank, ctx.world_size, item["seed"])
        _dist.report(answer=i, **record)
        if record.get("event") == "error":      # leave the group now: a peer still waiting on
            dist.destroy_process_group()        # this rank fails at once, not at its timeout
    fresh_group(store, "end/", ctx.rank, ctx.world_size)
    _dist.teardown()


# ------------------------------------------------------------------ in the kernel
def judge_scripts(exercise_id: str, scripts, seeds=None, timeout: float | None = None) -> list:
    """One `Verdict` per script of exercise `exercise_id`, from one launch of its ranks (a
    missing file: "not yet", without launching it)."""
    from dltutor.grading import ranks
    from dltutor.grading.verdict import not_yet
    exercise = importlib.import_module(EXERCISES[exercise_id])
    seeds = list(seeds) if seeds is not None else [random.randrange(1, 10 ** 6) for _ in scripts]
    items = [{"path": str(Path(p).resolve()), "seed": s} for p, s in zip(scripts, seeds)
             if not ranks.missing(p)]
    env = {ANSWERS_ENV: json.dumps(items), EXERCISE_ENV: exercise_id}
    ran = ranks.run_on_ranks(Path(__file__), nproc=exercise.NPROC, env=env, echo=False,
                             timeout=timeout or 60 + len(items) * (2 * ANSWER_TIMEOUT),
                             dist_timeout=ANSWER_TIMEOUT) if items else None
    judged = {item["path"]: _verdict(exercise_id, exercise, item,
                                     [m for m in ran.metrics if m.get("answer") == i], ran)
              for i, item in enumerate(items)}
    return [not_yet(exercise_id, ranks.missing(p)) if ranks.missing(p)
            else judged[str(Path(p).resolve())] for p in scripts]


def _verdict(exercise_id: str, exercise, item: dict, metrics: list, ran):
    """The verdict on one answer from its ranks' reports, as `check` would give it."""
    from dltutor.grading import ranks
    from dltutor.grading.verdict import from_problems, not_yet, wrong
    todo = [m["error"] for m in metrics if ranks.UNSTARTED in m.get("error", "")]
    if todo:
        text = exercise.handout(exercise.HANDOUT)
        if text is None or ranks.untouched(item["path"], text):
            return not_yet(exercise_id, f"a TODO still raises {todo[0]}")
        return wrong(exercise_id, f"the script ran, but a TODO in it still raises {todo[0]}")
    if len(metrics) < exercise.NPROC:
        return wrong(exercise_id, f"not every rank reported: {ran.failure}")
    problems, summary = exercise.judge(metrics, item["seed"])
    return from_problems(exercise_id, problems, summary)

if __name__ == "__main__":
    main()
