"""Notebook 07's library (dltutor.io) and lab 07_io: formats round-trip byte for byte, every
sharding reads each sample exactly once, the starvation metric and the exercise's check."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dltutor.core.course import lab
from dltutor.io import bench, formats, measure, runs, sharding, source, starve

N, PER_SHARD = 100, 16   # 7 shards, the last one short


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("io")
    images, labels = source.load(N)
    for fmt in formats.FORMATS:
        formats.write(fmt, root, images, labels, per_shard=PER_SHARD)
    return root, images, labels


def _items(ds):
    return list(ds) if isinstance(ds, torch.utils.data.IterableDataset) else [ds[i] for i in range(len(ds))]


def test_source_is_the_real_fashion_mnist():
    images, labels = source.load(10)
    assert images.shape == (10, 28, 28) and images.dtype == np.uint8
    assert labels.tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]   # the first ten training labels


@pytest.mark.parametrize("fmt", formats.FORMATS)
def test_every_format_round_trips_byte_for_byte(written, fmt):
    root, images, labels = written
    items = _items(formats.dataset(fmt, root))
    assert sorted(i for _, _, i in items) == list(range(N))
    for image, label, i in items:
        assert image.shape == (1, 28, 28) and image.dtype == torch.uint8
        assert image.numpy().tobytes() == images[i].tobytes(), f"{fmt}: sample {i} differs"
        assert label == labels[i]


def test_memmap_file_is_the_raw_pixels(written):
    root, images, _ = written
    assert (root / "memmap" / "images.u8").read_bytes() == images.tobytes()
    assert len(formats.files_of("files", root)) == N
    assert len(formats.files_of("shards", root)) == -(-N // PER_SHARD)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_file_level_shards_cover_every_sample_once(written, world_size):
    root = written[0]
    shards = formats.files_of("shards", root)
    per_rank = [[i for _, _, i in formats.shard_stream(sharding.shards_for_rank(shards, r, world_size))]
                for r in range(world_size)]
    cover = sharding.coverage(per_rank, N)
    assert cover["exactly_once"], cover
    assert sum(cover["per_rank"]) == N


def test_shards_split_over_dataloader_workers_without_repeats(written):
    root = written[0]
    ds = formats.dataset("shards", root)
    ids = [int(i) for _, _, b in measure.loader(ds, 8, workers=2) for i in b]
    assert sorted(ids) == list(range(N))


def test_distributed_sampler_pads_or_drops_when_n_does_not_divide():
    padded = sharding.coverage([sharding.sampler_indices(N, r, 3) for r in range(3)], N)
    assert not padded["exactly_once"] and padded["repeated"] and not padded["missing"]
    assert padded["per_rank"] == [34, 34, 34]
    dropped = sharding.coverage([sharding.sampler_indices(N, r, 3, drop_last=True) for r in range(3)], N)
    assert dropped["missing"] and not dropped["repeated"]
    even = sharding.coverage([sharding.sampler_indices(N, r, 4, shuffle=True) for r in range(4)], N)
    assert even["exactly_once"]


def test_too_few_shards_for_the_ranks_is_a_clear_error():
    with pytest.raises(ValueError, match="shard per rank"):
        sharding.shards_for_rank(["a.tar"], 0, 2)
    assert sharding.balance([64, 36], 16) == dict(steps=[4, 3], min_steps=3, equal=False)


def _fs_type(path: Path) -> str:
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        mount, fs = line.split()[1:3]
        if str(path.resolve()).startswith(mount) and len(mount) > len(best):
            best, kind = mount, fs
    return kind


def test_drop_cache_empties_the_page_cache_of_our_files(written):
    root = written[0]
    paths = formats.files_of("shards", root)
    for p in paths:
        p.read_bytes()
    assert measure.resident_fraction(paths) == 1.0
    measure.drop_cache(paths)
    after = measure.resident_fraction(paths)
    if _fs_type(root) == "tmpfs":    # RAM is the file system: nothing can be dropped
        assert after == 1.0
    else:
        assert after < 0.5
    row = measure.read_rate(lambda: measure.loader(formats.dataset("shards", root), 32), paths)
    assert row["samples"] == N and row["cache"] in ("cold", "partly cached", "warm")


class _SlowBatches(torch.utils.data.IterableDataset):
    """A loader known to be slow: `delay` seconds per batch of 8 in-memory samples."""

    def __init__(self, batches, delay):
        super().__init__()
        self.batches, self.delay = batches, delay

    def __iter__(self):
        for _ in range(self.batches):
            time.sleep(self.delay)
            yield torch.zeros(8, 1, 28, 28, dtype=torch.uint8), torch.zeros(8, dtype=torch.long), torch.arange(8)


class _SlowModel(torch.nn.Module):
    """A model known to be slow: its forward sleeps `delay` seconds."""

    def __init__(self, delay):
        super().__init__()
        self.delay, self.lin = delay, torch.nn.Linear(28 * 28, 10)

    def forward(self, x):
        time.sleep(self.delay)
        return self.lin(x.flatten(1))


def test_wait_share_spots_the_slow_loader_and_the_slow_model():
    starved = starve.timeline(_SlowBatches(5, 0.05), starve.light_model(), steps=5, threads=1)
    fed = starve.timeline(_SlowBatches(5, 0.0), _SlowModel(0.05), steps=5, threads=1)
    assert len(starved) == len(fed) == 5
    assert starve.wait_share(starved) > 0.8 and starve.verdict(starved).startswith("starved")
    assert starve.wait_share(fed) < 0.2 and starve.verdict(fed).startswith("fed")
    rows = [dict(wait_s=9.0, compute_s=0.0), dict(wait_s=3.0, compute_s=1.0), dict(wait_s=1.0, compute_s=3.0)]
    assert starve.wait_share(rows) == pytest.approx(0.5)          # step 0 (start-up) left out
    assert starve.wait_share(rows, skip_first=False) == pytest.approx(13 / 17)


def test_exercise_check_runs_the_answer_against_measured_timelines():
    timelines = {"slow loader": starve.timeline(_SlowBatches(4, 0.04), starve.light_model(), steps=4, threads=1),
                 "slow model": starve.timeline(_SlowBatches(4, 0.0), _SlowModel(0.04), steps=4, threads=1)}
    assert starve.check_starved({"slow loader"}, timelines)
    assert not starve.check_starved({"slow model"}, timelines)
    assert not starve.check_starved(set(), timelines)
    assert not starve.check_starved(None, timelines)
    assert not starve.check_starved({"no such run"}, timelines)
    close = {"even": [dict(wait_s=1, compute_s=1), dict(wait_s=0.55, compute_s=0.45)]}
    assert starve.check_starved(set(), close) and starve.check_starved({"even"}, close)


def test_exercise_check_reads_one_run_name_as_a_set_of_one(capsys):
    timelines = {"mlp + files/w0": [dict(wait_s=1, compute_s=1), dict(wait_s=0.9, compute_s=0.1)],
                 "mlp + memmap/w0": [dict(wait_s=1, compute_s=1), dict(wait_s=0.1, compute_s=0.9)]}
    assert starve.check_starved("mlp + files/w0", timelines)           # a bare string: one name
    assert "Unknown run name" not in capsys.readouterr().out
    assert not starve.check_starved("mlp + memmap/w0", timelines)
    assert "WRONG" in capsys.readouterr().out
    assert not starve.check_starved({}, timelines)                     # {} read as the empty set
    assert "WRONG mlp + files/w0" in capsys.readouterr().out
    assert not starve.check_starved(3, timelines)
    assert "set it to a set of run names" in capsys.readouterr().out


def test_lab_on_two_gloo_ranks_reads_each_sample_once(tmp_path):
    root = bench.prepare(tmp_path / "data", n=96, fmts=("shards", "memmap"), per_shard=16)
    result = runs.run_lab(2, root, samples=96, per_shard=16, fmts=("shards", "memmap"), batch_size=16,
                          timeout=300)
    rows = runs.rows(result)
    assert {(r["rank"], r["format"]) for r in rows} == {(0, "shards"), (1, "shards"), (0, "memmap"), (1, "memmap")}
    assert all(r["exactly_once"] for r in rows), rows
    assert [r["samples"] for r in rows if r["format"] == "shards"] == [48, 48]
    assert {r["mode"] for r in rows} == {"file-level shards", "DistributedSampler"}


def test_lab_refuses_bad_input_with_one_sentence(capsys):
    import importlib.util
    spec = importlib.util.spec_from_file_location("io_bench", lab("07_io/io_bench.py"))
    io_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(io_bench)
    for argv, words in ((["--samples", "70000"], "60000 training images"),
                        (["--formats", "zip"], "choose from files,shards,memmap,hdf5"),
                        (["--workers", "-1"], "--workers")):
        with pytest.raises(SystemExit) as exc:
            io_bench.parse_args(argv)
        assert exc.value.code == 2 and words in capsys.readouterr().err
    assert io_bench.parse_args(["--tiny"]).samples == 512


def test_shard_members_read_the_same_samples_at_random(written):
    root = written[0]
    ds = formats.ShardMembers(root)
    streamed = {k: (x, y) for shard in formats.files_of("shards", root) for x, y, k in formats.shard_samples(shard)}
    assert len(ds) == len(streamed) == N and (root / formats.INDEX).is_file()
    for i in (0, N // 2, N - 1, 7):
        x, y, k = ds[i]
        assert k == i and y == streamed[k][1] and torch.equal(x, streamed[k][0])


def test_lab_compares_the_two_splits_on_the_same_shards(tmp_path):
    root = bench.prepare(tmp_path / "data", n=96, fmts=("shards",), per_shard=16)
    result = runs.run_lab(2, root, samples=96, per_shard=16, fmts=("shards",), batch_size=16,
                          shard_splits=("file-level", "sampler"), timeout=300)
    rows = runs.rows(result)
    assert {(r["rank"], r["mode"]) for r in rows} == {(0, "file-level shards"), (1, "file-level shards"),
                                                      (0, "DistributedSampler"), (1, "DistributedSampler")}
    assert {r["format"] for r in rows} == {"shards"} and all(r["exactly_once"] for r in rows), rows
