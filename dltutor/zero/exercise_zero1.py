"""Notebook 04's exercise: ZeRO-1 by hand, on 2 gloo ranks.

The student writes `shard_bounds(numel, rank, world_size)` and a class `Zero1(params, rank,
world_size)` whose `step()` runs after backward: average the flat gradient over the ranks, step
Adam on this rank's shard of the flat parameters only, all-gather the shards back into every
rank's parameters. The script imports `adam` and `run` from here and ends with `run(Zero1)`.

`check(script)` launches it on 2 gloo ranks (`exercise_zero1_ranks.run`: two models of different,
odd sizes from seeds drawn per check, 3 steps each, each rank's parameters and Adam state
reported after every step) and judges the reports (`exercise_zero1_judge.judge`): every rank
after every step against one process running torch.optim.Adam on the whole global batch, and
each rank's Adam state against that process's: about half its bytes, its exp_avg equal to one
process's on one slice of the flat vector, the ranks' slices covering every element once.
"""
from __future__ import annotations

from dltutor.core import course
from dltutor.grading import ranks
from dltutor.zero.exercise_zero1_judge import judge
from dltutor.zero.exercise_zero1_ranks import (NPROC, SEED_ENV, STEPS, adam, build_model, flat,
                                               run, run_seeds)

EXERCISE = "04-zero1"
__all__ = ["EXERCISE", "NPROC", "SEED_ENV", "STEPS", "adam", "build_model", "check", "flat",
           "judge", "run", "run_seeds", "work_file"]     # adam and run: the student's imports


def work_file():
    """Where the notebook writes the student's script (`%%writefile {path}`)."""
    return ranks.work_file("zero1_by_hand.py")


def check(script=None, solution: bool = False, echo: bool = False, seed: int | None = None,
          timeout: float = 120.0) -> bool:
    """Launch the ZeRO-1 script on 2 gloo ranks, print the verdict, return whether it passed."""
    if solution:
        script = course.lab("04_deepspeed/solutions/zero1_by_hand.py")
    script = work_file() if script is None else script
    return ranks.check_script(EXERCISE, script, judge, nproc=NPROC,
                              todo="shard_bounds and Zero1", seed_env=SEED_ENV,
                              reference=solution, echo=echo, timeout=timeout, seed=seed)
