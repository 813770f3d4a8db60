"""Start a rank's command with only its own GPU visible, in the order its site gives.

    python -m dltutor.launch.gpu_bind COMMAND [ARGS...]

Some centres hand the GPUs of a node to its local ranks in an order of their own (ALCF's affinity
script on Polaris: local rank 0 gets GPU 3, as the profile's `gpu_order` records with its source).
A job script of such a site exports DLTUTOR_GPU_ORDER ("3,2,1,0") and starts each rank through this
module: it sets CUDA_VISIBLE_DEVICES to order[local_rank] (an index into CUDA_VISIBLE_DEVICES when
the scheduler already set one) and execs the command, so the rank sees one GPU, cuda:0
(dltutor.core.device). The local rank comes from HOROVOD_LOCAL_RANK (horovodrun), LOCAL_RANK,
PALS_LOCAL_RANKID (PBS mpiexec), PMI_LOCAL_RANK or SLURM_LOCALID (srun). The srun, mpiexec and
horovodrun forms start ranks through it; DeepSpeed's launcher sets CUDA_VISIBLE_DEVICES itself, in
index order, so there the job says the order is not applied. Standard library only.
"""
import os
import sys

# launcher-specific first: horovodrun's and torchrun's ranks inherit the batch step's SLURM_LOCALID
LOCAL_RANK_VARS = ("HOROVOD_LOCAL_RANK", "LOCAL_RANK", "PALS_LOCAL_RANKID", "PMI_LOCAL_RANK",
                   "SLURM_LOCALID")


def local_rank(env=os.environ) -> int:
    for name in LOCAL_RANK_VARS:
        if env.get(name, "").strip().isdigit():
            return int(env[name])
    raise SystemExit(f"gpu_bind: no local rank in the environment (none of {', '.join(LOCAL_RANK_VARS)}"
                     " is set): start the ranks with the site's launcher (mpiexec or srun)")


def visible_device(env=os.environ) -> str:
    """The CUDA device this local rank gets from DLTUTOR_GPU_ORDER."""
    try:
        order = [int(x) for x in env["DLTUTOR_GPU_ORDER"].split(",")]
    except (KeyError, ValueError):
        raise SystemExit("gpu_bind: DLTUTOR_GPU_ORDER must be a comma-separated list of GPU "
                         f"indices, not {env.get('DLTUTOR_GPU_ORDER')!r}") from None
    gpu = order[local_rank(env) % len(order)]
    visible = [v for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[gpu] if gpu < len(visible) else str(gpu)


def main(argv) -> int:
    if not argv:
        raise SystemExit("usage: python -m dltutor.launch.gpu_bind COMMAND [ARGS...]")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible_device()
    os.execvp(argv[0], argv)
    return 1   # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
