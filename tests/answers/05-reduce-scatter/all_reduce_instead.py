# expect: wrong
# names: all_reduce is not part of this exercise
# why: reaches for the collective instead of writing the step with send/recv
import torch.distributed as dist

from dltutor.allreduce.exercise import run


def reduce_scatter_step(chunks, rank, world_size, step):
    dist.all_reduce(chunks[(rank - step) % world_size])


if __name__ == "__main__":
    run(reduce_scatter_step)
