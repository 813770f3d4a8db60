"""In the kernel: run the student's Horovod exercise script on 2 workers and judge it.

    check(path)            # horovodrun -np 2 --gloo on the CPU, then "passed", "not yet" or "wrong: ..."
    check(solution=True)   # the hidden solution:
                           # course/labs/03_horovod/solutions/exercise_horovod.py

The script is notebook 02's exercise loop (`dltutor.ddp.exercise`) with Horovod's lines instead
of DDP's, so the judge is the same (`dltutor.ddp.exercise_judge`): the workers start equal and
end with the same weights, equal to one process on the same global batches (gradients averaged,
whether by hvd.DistributedOptimizer or by hand); in every epoch each worker read its own shard
of the data, the shards covering it (a size drawn per check, never a multiple of the workers),
reshuffled each epoch; rank 0 alone wrote the checkpoint.
Only the advice is in Horovod's words. Pinning (TODO 2) and hvd.shutdown() do not change the
weights, so they are not judged.
"""
from __future__ import annotations

from dltutor.core import course
from dltutor.ddp import exercise_check

HINTS = {  # what is missing, in the words of the notebook's TODOs (never the code)
    "init": "no Horovod job was joined while the workers trained: join the job horovodrun "
            "started first (TODO 1)",
    "shard": "every worker read the whole data set: give each its own 1/size of it, with a "
             "sampler that knows this worker's rank and the number of workers (TODO 5a)",
    "no_shuffle": "the data is never shuffled: each worker read its shard in the stored "
                  "order, the same every epoch (the sampler's shuffle is off)",
    "set_epoch": "every epoch read the same shuffled order as the epoch before: tell the "
                 "sampler which epoch begins (its set_epoch), so that it shuffles anew "
                 "(TODO 5b)",
    "average": "the workers end with different weights: their gradients were not averaged; "
               "wrap the optimizer so that it averages the gradients over the workers "
               "(TODO 3)",
    "broadcast": "the gradients were averaged, but the workers kept their different random "
                 "starting weights: start every worker from rank 0's weights and optimizer "
                 "state (TODO 4)",
    "summed": "each step was hvd.size() times too large: the gradients were summed over the "
              "workers, not averaged, or the learning rate was multiplied by hvd.size() (keep "
              "ex.optimizer's: see the text above)",
    "too_small": "each step was hvd.size() times too small: the learning rate was divided by "
                 "hvd.size(), or the averaged gradients were divided again (keep "
                 "ex.optimizer's learning rate; average once)",
    "rank0": "only rank 0 should write the checkpoint: one writer, not every worker (TODO 5c)",
    "module": "the checkpoint holds wrapped names ('module.'): save the plain model's weights",
    "teardown": "",
}


def work_file():
    """Where the notebook writes the student's script (`%%writefile {path}`)."""
    return exercise_check.work_file("exercise_horovod.py")


def check(script=None, solution: bool = False, echo: bool = True) -> bool:
    """Notebook 03's exercise: run `script` with horovodrun --gloo on 2 CPU workers."""
    if solution:
        script = course.lab("03_horovod/solutions/exercise_horovod.py")
    # --no-cuda: the Horovod back end then picks --gloo even on a GPU node (the check is on CPUs)
    return exercise_check.run_and_judge(script if script is not None else work_file(), "horovod",
                                        args=["--no-cuda"], hints=HINTS, teardown=False, echo=echo,
                                        exercise="03-horovod", reference=solution)
