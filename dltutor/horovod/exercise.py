"""In the kernel: run the student's Horovod exercise script on 2 workers and judge it.

    check(path)            # horovodrun -np 2 --gloo on the CPU, then "passed", "not yet" or "wrong: ..."
    check(solution=True)   # the hidden solution:
                           # course/labs/03_horovod/solutions/exercise_horovod.py

The script is notebook 02's exercise loop (`dltutor.ddp.exercise`) with Horovod's lines instead
of DDP's, so the judge is the same (`dltutor.ddp.exercise_check.judge`): both workers end with
the same weights, equal to one process on the same global batches from rank 0's starting weights;
each worker read its own DistributedSampler shard, reshuffled each epoch; rank 0 alone wrote the
checkpoint. Only the advice is in Horovod's words. Pinning (TODO 2) and hvd.shutdown() do not
change the weights, so they are not judged.
"""
from __future__ import annotations

from dltutor.core import course
from dltutor.ddp import exercise_check

HINTS = {
    "init": "no Horovod job was joined while the workers trained: call hvd.init() first (TODO 1)",
    "shard": "every worker read the whole data set: give each its own 1/size (TODO 5a: "
             "DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank()) as the "
             "loader's sampler)",
    "set_epoch": "every epoch read the same order: call sampler.set_epoch(epoch) at the start "
                 "of each epoch (TODO 5b)",
    "average": "the workers end with different weights: their gradients were not averaged "
               "(TODO 3: optimizer = hvd.DistributedOptimizer(optimizer, "
               "named_parameters=model.named_parameters()))",
    "broadcast": "the gradients were averaged, but the workers kept their different random "
                 "starting weights (TODO 4: hvd.broadcast_parameters(model.state_dict(), "
                 "root_rank=0) and hvd.broadcast_optimizer_state(optimizer, root_rank=0))",
    "rank0": "only rank 0 should write the checkpoint (TODO 5c: `if hvd.rank() == 0:`)",
    "module": "the checkpoint holds wrapped names ('module.'): save the plain model's state_dict",
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
