"""Every exercise of the course: where it is, what the student writes, on how many ranks.

The ids are what the checks record (`dltutor.grading.verdict`) and what the instructor's report
lists, in this order. `ranks` is how many processes the check runs the student's code on (1: the
check calls the student's function in the kernel, on cases the student has not seen).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Exercise:
    id: str
    notebook: str          # the file under course/notebooks/
    title: str
    writes: str            # what the student writes
    ranks: int             # processes the check runs the student's code on


EXERCISES = (
    Exercise("01-batch-size", "01_single_gpu_cifar10.ipynb", "the fastest batch size",
             "a throughput measurement the check re-runs", 1),
    Exercise("02-ddp", "02_ddp_multi_gpu.ipynb", "DDP by hand",
             "the DDP lines of a training script", 2),
    Exercise("03-horovod", "03_horovod_synthetic_resnet50.ipynb", "Horovod by hand",
             "the Horovod lines of a training script", 2),
    Exercise("04-memory", "04_deepspeed_out_of_core_bert.ipynb", "bytes per rank, per ZeRO stage",
             "the memory formula as a function, checked on unseen models", 1),
    Exercise("04-zero1", "04_deepspeed_out_of_core_bert.ipynb", "ZeRO-1 by hand",
             "Adam on a shard of the flat parameters, then an all-gather", 2),
    Exercise("05-reduce-scatter", "05_ring_allreduce_visualizer.ipynb", "one ring step",
             "a reduce-scatter step with send/recv", 3),
    Exercise("06-tensor-parallel", "06_model_parallelism.ipynb", "a Megatron MLP by hand",
             "column- then row-parallel linear layers with one all-reduce", 2),
    Exercise("06-pipeline", "06_model_parallelism.ipynb", "a GPipe forward by hand",
             "micro-batches sent between 2 stages", 2),
    Exercise("06-placement", "06_model_parallelism.ipynb", "place the ranks",
             "rank -> (tp, pp, dp) for any cluster shape, checked on unseen shapes", 1),
    Exercise("07-file-sharding", "07_input_pipeline.ipynb", "a file-sharded loader",
             "each rank reads its own files, reshuffled every epoch", 2),
    Exercise("08-diagnose", "08_debugging_distributed.ipynb", "diagnose an unseen broken run",
             "the rank and the cause, checked against what the run did", 2),
    Exercise("08-fix-hang", "08_debugging_distributed.ipynb", "make a hanging script finish",
             "the same collectives on every rank, whatever its share of the data", 2),
    Exercise("09-ring-attention", "09_long_sequences_and_experts.ipynb", "ring attention by hand",
             "the online-softmax merge and the K/V loop round the ring, output and gradients", 3),
    Exercise("09-moe-dispatch", "09_long_sequences_and_experts.ipynb", "MoE dispatch and combine",
             "count exchange, dispatch and combine with all_to_all_single", 2),
    Exercise("10-resume", "10_checkpoints_and_restarts.ipynb", "save and resume, bit for bit",
             "an app state for DCP: a run killed at an unseen step resumes bit-identical", 2),
)

BY_ID = {e.id: e for e in EXERCISES}


def get(exercise_id: str) -> Exercise:
    try:
        return BY_ID[exercise_id]
    except KeyError:
        raise KeyError(f"no exercise {exercise_id!r}; the course's are {', '.join(BY_ID)}") from None
