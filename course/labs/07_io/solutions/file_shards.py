"""Solution of notebook 07's exercise: a file-sharded loader, reshuffled every epoch.

Hidden from the notebook; its check runs it with `exercise_shards.check(solution=True)` and
tests/test_exercises_io_single.py proves the check passes on it and fails on broken copies of it.
Run by the check only: it needs the shard folder the check makes ($DLTUTOR_EXERCISE_SHARDS).
"""
import random

import torch.utils.data as tud

from dltutor.io import exercise_shards as ex


class MyShards(tud.IterableDataset):
    """The samples of this rank's shard files; the loop calls set_epoch(e) before epoch e."""

    def __init__(self, files, rank, world_size, seed=0):
        super().__init__()
        self.files, self.rank, self.world_size, self.seed = list(files), rank, world_size, seed
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def my_files(self):
        order = list(self.files)
        # one order per epoch, the same on every rank: the seed and the epoch, never the rank
        random.Random(self.seed + self.epoch).shuffle(order)
        return order[self.rank::self.world_size]     # whole files: every world_size-th one

    def __iter__(self):
        for path in self.my_files():
            yield from ex.read_shard(path)           # front to back, every sample of the file


if __name__ == "__main__":
    ex.run(MyShards)
