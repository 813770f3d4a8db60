# expect: solved
# why: bounds from torch.chunk of the index range, a shard per rank kept in a dict, the gather done as one broadcast from each rank
import torch
import torch.distributed as dist

from dltutor.zero.exercise_zero1 import adam, run


def shard_bounds(numel, rank, world_size):
    pieces = torch.arange(numel).chunk(world_size)
    if rank >= len(pieces):
        return numel, numel
    return int(pieces[rank][0]), int(pieces[rank][-1]) + 1


class Zero1:
    def __init__(self, params, rank, world_size):
        self.params = list(params)
        self.rank, self.world_size = rank, world_size
        vec = torch.nn.utils.parameters_to_vector(self.params).detach()
        self.n = vec.numel()
        self.spans = {r: shard_bounds(self.n, r, world_size) for r in range(world_size)}
        lo, hi = self.spans[rank]
        self.state = {"shard": vec[lo:hi].clone()}
        self.optimizer = adam([self.state["shard"]])

    def step(self):
        grads = torch.nn.utils.parameters_to_vector([p.grad for p in self.params])
        dist.all_reduce(grads, op=dist.ReduceOp.SUM)
        lo, hi = self.spans[self.rank]
        shard = self.state["shard"]
        shard.grad = (grads / self.world_size)[lo:hi]
        self.optimizer.step()
        vec = torch.nn.utils.parameters_to_vector(self.params).detach().clone()
        for r, (a, b) in self.spans.items():
            piece = shard.detach().clone() if r == self.rank else torch.empty(b - a, dtype=vec.dtype)
            dist.broadcast(piece, src=r)
            vec[a:b] = piece
        torch.nn.utils.vector_to_parameters(vec, self.params)


if __name__ == "__main__":
    run(Zero1)
