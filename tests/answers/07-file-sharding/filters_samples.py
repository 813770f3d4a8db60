# expect: wrong
# names: every rank read all 11 files.*file-level sharding|file-level sharding.*every rank read all
# why: sample-level sharding: every rank opens every file of the shuffled list and keeps every world_size-th sample
import random

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
        order = list(self.files)
        random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def __iter__(self):
        k = 0
        for path in self.my_files():
            for sample in ex.read_shard(path):
                if k % self.world_size == self.rank:
                    yield sample
                k += 1


if __name__ == "__main__":
    ex.run(MyShards)
