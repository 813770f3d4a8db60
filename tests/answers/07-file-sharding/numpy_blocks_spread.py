# expect: solved
# why: a numpy permutation seeded with (seed, epoch), cut into contiguous blocks with the remainder spread (array_split)
import numpy as np
import torch.utils.data as tud

from dltutor.io import exercise_shards as ex


class MyShards(tud.IterableDataset):
    def __init__(self, files, rank, world_size, seed=0):
        super().__init__()
        self.files, self.rank, self.world_size, self.seed = list(files), rank, world_size, seed
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def my_files(self):
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.files))
        block = np.array_split(order, self.world_size)[self.rank]
        return [self.files[int(i)] for i in block]

    def __iter__(self):
        for path in self.my_files():
            yield from ex.read_shard(path)


if __name__ == "__main__":
    ex.run(MyShards)
