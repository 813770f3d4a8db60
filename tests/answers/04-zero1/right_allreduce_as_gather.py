# expect: solved
# why: the last rank takes the extra element (28 + 29), the shard is a view of its own flat copy, gradients all-reduced per parameter, the "all-gather" done as an all-reduce of zero-filled full vectors
import torch
import torch.distributed as dist

from dltutor.zero.exercise_zero1 import adam, run


def shard_bounds(numel, rank, world_size):
    base = numel // world_size
    lo = rank * base
    hi = numel if rank == world_size - 1 else lo + base
    return lo, hi


class Zero1:
    def __init__(self, params, rank, world_size):
        self.params = list(params)
        self.rank, self.world_size = rank, world_size
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.lo, self.hi = shard_bounds(self.flat.numel(), rank, world_size)
        self.shard = self.flat[self.lo:self.hi]     # a view: Adam's state is the slice's size
        self.optimizer = adam([self.shard])

    def step(self):
        for p in self.params:
            dist.all_reduce(p.grad)
            p.grad.div_(self.world_size)
        grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        self.shard.grad = grad[self.lo:self.hi]
        self.optimizer.step()
        full = torch.zeros_like(self.flat)
        full[self.lo:self.hi] = self.shard.detach()
        dist.all_reduce(full)                        # each element is non-zero on one rank only
        at = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(full[at:at + p.numel()].view_as(p))
                at += p.numel()


if __name__ == "__main__":
    run(Zero1)
