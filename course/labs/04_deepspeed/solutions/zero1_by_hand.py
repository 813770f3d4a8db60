# Solution: ZeRO-1 by hand. Each rank keeps Adam's state (exp_avg, exp_avg_sq, step) for its
# shard of the flat parameters only; gradients are averaged over the ranks, each rank steps its
# shard, and the shards are all-gathered back into every rank's full parameters.
import torch
import torch.distributed as dist

from dltutor.zero.exercise_zero1 import adam, run


def shard_bounds(numel, rank, world_size):
    """Flat elements [lo, hi) of `rank`'s shard: ceil(numel / world_size) each, the last rank
    takes what is left (numel need not divide evenly)."""
    size = -(-numel // world_size)
    lo = min(rank * size, numel)
    return lo, min(lo + size, numel)


class Zero1:
    def __init__(self, params, rank, world_size):
        self.params = list(params)
        self.rank, self.world_size = rank, world_size
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.numel = flat.numel()
        self.lo, self.hi = shard_bounds(self.numel, rank, world_size)
        self.shard = flat[self.lo:self.hi].clone()          # this rank's slice, its own memory
        self.optimizer = adam([self.shard])                  # Adam's state: the shard's only

    def step(self):
        grad = torch.cat([p.grad.reshape(-1) for p in self.params])
        dist.all_reduce(grad)                                # sum over the ranks ...
        grad /= self.world_size                              # ... averaged
        self.shard.grad = grad[self.lo:self.hi].clone()
        self.optimizer.step()
        # all-gather: every rank sends its shard, padded to one size (all_gather needs equal sizes)
        size = -(-self.numel // self.world_size)
        mine = torch.zeros(size, dtype=self.shard.dtype)
        mine[:self.hi - self.lo] = self.shard.detach()
        parts = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(parts, mine)
        full = torch.empty(self.numel, dtype=mine.dtype)
        for r, part in enumerate(parts):
            lo, hi = shard_bounds(self.numel, r, self.world_size)
            full[lo:hi] = part[:hi - lo]
        torch.nn.utils.vector_to_parameters(full, self.params)


if __name__ == "__main__":
    run(Zero1)      # given: the model, each rank's half of the batch, backward, reports
