# expect: solved
# why: DeepSpeed's layout: the flat buffer padded to a multiple of world_size, equal shards (the last one ends in zeros, its Adam state too), ReduceOp.AVG, all_gather_into_tensor
import torch
import torch.distributed as dist

from dltutor.zero.exercise_zero1 import adam, run


def shard_bounds(numel, rank, world_size):
    per = (numel + world_size - 1) // world_size
    return min(numel, rank * per), min(numel, rank * per + per)


class Zero1:
    def __init__(self, params, rank, world_size):
        self.params = [p for p in params]
        self.world_size = world_size
        self.numel = sum(p.numel() for p in self.params)
        self.per = (self.numel + world_size - 1) // world_size
        padded = torch.zeros(self.per * world_size, dtype=self.params[0].dtype)
        padded[:self.numel] = torch.cat([p.detach().flatten() for p in self.params])
        self.shard = padded[rank * self.per:(rank + 1) * self.per].clone()
        self.optimizer = adam([self.shard])
        self.rank = rank

    def _padded_grad(self):
        g = torch.zeros(self.per * self.world_size, dtype=self.shard.dtype)
        g[:self.numel] = torch.cat([p.grad.flatten() for p in self.params])
        return g

    def step(self):
        g = self._padded_grad()
        dist.all_reduce(g, op=dist.ReduceOp.AVG)
        self.shard.grad = g[self.rank * self.per:(self.rank + 1) * self.per].clone()
        self.optimizer.step()
        out = torch.empty(self.per * self.world_size, dtype=self.shard.dtype)
        dist.all_gather_into_tensor(out, self.shard.detach())
        torch.nn.utils.vector_to_parameters(out[:self.numel], self.params)


if __name__ == "__main__":
    run(Zero1)
