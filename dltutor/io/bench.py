"""The measurements of notebook 07 and lab 07_io, each one call: write the formats once, read
each back (cold and warm), sweep workers/prefetch, stage, and time the step fed by each pipeline.

    root = bench.prepare(folder, n=2048)          # Fashion-MNIST written in every format
    rows = bench.read_formats(root, batch_size=128)
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from dltutor.io import formats, measure, sharding, source, starve

META = "meta.json"


def prepare(root, n: int, fmts=formats.FORMATS, per_shard: int = 256) -> Path:
    """Write the first `n` Fashion-MNIST training images under `root` in each format (kept when
    root/meta.json says they are there already); returns root."""
    root = Path(root)
    want = dict(n=n, per_shard=per_shard, formats=sorted(fmts), data=source.NAME)
    meta = root / META
    if not (meta.is_file() and json.loads(meta.read_text()) == want):
        for fmt in formats.FORMATS:
            shutil.rmtree(root / fmt, ignore_errors=True)
        (root / formats.INDEX).unlink(missing_ok=True)
        images, labels = source.load(n)
        for fmt in fmts:
            formats.write(fmt, root, images, labels, per_shard=per_shard)
        meta.write_text(json.dumps(want))
    if "shards" in fmts:
        formats.shard_index(root)   # now, not inside a timed pass
    return root


def meta(root) -> dict:
    return json.loads((Path(root) / META).read_text())


def sizes(root, fmts=formats.FORMATS) -> list[dict]:
    """Files per format, the bytes they hold (`apparent_mb`) and the space they take on the
    device (`allocated_mb`, whole blocks per file, as `du` counts)."""
    rows = []
    for fmt in fmts:
        paths = formats.files_of(fmt, root)
        rows.append(dict(format=fmt, files=len(paths), apparent_mb=measure.disk_bytes(paths) / 1e6,
                         allocated_mb=measure.allocated_bytes(paths) / 1e6))
    return rows


def read_share(fmt: str, root, rank: int = 0, world_size: int = 1, batch_size: int = 128,
               workers: int = 0, prefetch: int = 2, cold: bool = True, seed: int = 0,
               split: str = "file-level") -> dict:
    """One pass over this rank's share of format `fmt`: tar shards split by file (rank r reads
    shards[r::W]) unless split="sampler"; the other formats, and the shards with split="sampler"
    (each sample a seek into its shard), through a shuffled DistributedSampler over all samples."""
    n = meta(root)["n"]
    paths = formats.files_of(fmt, root)
    if fmt == "shards" and split == "file-level":
        mine = sharding.shards_for_rank(paths, rank, world_size)
        ds = formats.dataset("shards", root, shards=mine)
        row = measure.read_rate(lambda: measure.loader(ds, batch_size, workers, prefetch), mine,
                                cold=cold)
        how = "file-level shards"
    else:
        from torch.utils.data.distributed import DistributedSampler
        ds = formats.ShardMembers(root) if fmt == "shards" else formats.dataset(fmt, root)
        sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True,
                                     seed=seed)
        row = measure.read_rate(lambda: measure.loader(ds, batch_size, workers, prefetch, sampler),
                                paths, cold=cold, n_total=n)
        how = "DistributedSampler" if world_size > 1 else "shuffled"
    return dict(format=fmt, how=how, workers=workers, prefetch=prefetch, batch_size=batch_size,
                **row)


def read_formats(root, fmts=formats.FORMATS, batch_size: int = 128, workers: int = 0,
                 caches=("cold", "warm")) -> list[dict]:
    """One single-process pass per format and cache state (warm right after the cold pass);
    `asked` is the state asked for, `cache` the state mincore found before the pass."""
    return [dict(read_share(fmt, root, batch_size=batch_size, workers=workers, cold=cache == "cold"),
                 asked=cache) for fmt in fmts for cache in caches]


def worker_sweep(root, fmt: str, workers=(0, 1, 2), prefetch=(2, 8), batch_size: int = 128,
                 cold: bool = True) -> list[dict]:
    """read_share over num_workers x prefetch_factor. prefetch_factor means nothing without
    workers, so num_workers=0 is measured once and its row repeated under each prefetch."""
    rows = []
    for w in workers:
        if w == 0:
            row = read_share(fmt, root, batch_size=batch_size, workers=0, cold=cold)
            rows += [dict(row, prefetch=pf) for pf in prefetch]
            continue
        rows += [read_share(fmt, root, batch_size=batch_size, workers=w, prefetch=pf, cold=cold)
                 for pf in prefetch]
    return rows


def stage(root, fmt: str, local_root, batch_size: int = 128, workers: int = 0) -> dict:
    """Copy format `fmt` to `local_root` (what a job script does to node-local disk), and read one
    cold pass from each place."""
    local_root = Path(local_root)
    shutil.rmtree(local_root / fmt, ignore_errors=True)
    copy = measure.copy_files(formats.files_of(fmt, root), root, local_root)
    (local_root / META).write_text((Path(root) / META).read_text())
    shared = read_share(fmt, root, batch_size=batch_size, workers=workers, cold=True)
    local = read_share(fmt, local_root, batch_size=batch_size, workers=workers, cold=True)
    return dict(format=fmt, copy=copy, shared=shared, local=local,
                break_even_epochs=None if copy["same_device"] else
                break_even(copy["seconds"], shared["seconds"], local["seconds"]))


def break_even(copy_s, shared_s, local_s):
    """Epochs after which copy + local reads beat shared reads (None: staging never pays off).
    Only meaningful when the two places are different devices: on one device the difference
    between two cold passes is noise (`stage` then returns None)."""
    saving = shared_s - local_s
    return copy_s / saving if saving > 0 else None


def pipelines(root, names, batch_size: int):
    """name 'fmt/wN' -> a DataLoader factory (format fmt, N workers, one process, all samples)."""
    out = {}
    for name in names:
        fmt, w = name.split("/w")
        out[name] = (lambda f=fmt, k=int(w): measure.loader(formats.dataset(f, root), batch_size, k))
    return out


def timelines(root, models, names, steps: int, batch_size: int = 64, seed: int = 0,
              threads: int | None = None) -> dict:
    """'model + pipeline' -> starve.timeline rows, for every model name and pipeline name."""
    import torch
    out = {}
    for model in models:
        for name, make in pipelines(root, names, batch_size).items():
            torch.manual_seed(seed)
            out[f"{model} + {name}"] = starve.timeline(make(), starve.MODELS[model](), steps,
                                                           threads=threads)
    return out
