# expect: solved
# why: the global random module re-seeded from (seed, epoch) each epoch; contiguous blocks by divmod, the first ranks one file more
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
        order = sorted(self.files)
        random.seed(f"{self.seed}/{self.epoch}")
        random.shuffle(order)
        per, extra = divmod(len(order), self.world_size)
        start = self.rank * per + min(self.rank, extra)
        stop = start + per + (1 if self.rank < extra else 0)
        return order[start:stop]

    def __iter__(self):
        for path in self.my_files():
            yield from ex.read_shard(path)


if __name__ == "__main__":
    ex.run(MyShards)
