# expect: solved
# why: torch.randperm with a generator seeded from the seed and the epoch, every world_size-th file
import torch
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
        g = torch.Generator()
        g.manual_seed(self.seed * 1009 + self.epoch)
        perm = torch.randperm(len(self.files), generator=g)
        return [self.files[i] for i in perm[self.rank::self.world_size].tolist()]

    def __iter__(self):
        for path in self.my_files():
            for image, label, sample_id in ex.read_shard(path):
                yield image, label, sample_id


if __name__ == "__main__":
    ex.run(MyShards)
