"""Several ZeRO-1 answers in one launch of 2 ranks (tests/test_mutations_zero.py).

    python zero1_answers_worker.py FOLDER     every FOLDER/*.py defines a class Zero1

Each answer's Zero1 goes through the exercise's harness (`exercise_zero1_ranks.train`, both models
of the check's seed, DLTUTOR_ZERO1_SEED), its records tagged `answer=<file stem>`, so the test
judges each answer with `exercise_zero1_judge.judge` as the check does, for one launch in all.
"""
import functools
import os
import runpy
import sys
from pathlib import Path

from dltutor.core import dist
from dltutor.zero import exercise_zero1_ranks as ex


def main(folder: str) -> None:
    seed = int(os.environ[ex.SEED_ENV])
    report = dist.report
    with dist.session() as ctx:
        for path in sorted(Path(folder).glob("*.py")):
            zero1 = runpy.run_path(str(path), run_name="zero1_answer")["Zero1"]
            dist.report = functools.partial(report, answer=path.stem)
            try:
                for s in ex.run_seeds(seed):
                    ex.train(zero1, s, ctx.rank, ctx.world_size)
            finally:
                dist.report = report


if __name__ == "__main__":
    main(sys.argv[1])
