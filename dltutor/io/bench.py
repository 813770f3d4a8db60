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
from dltutor.io import rounds as rounds_

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
               split: str = "file-level", max_batches: int | None = None) -> dict:
    """One pass over this rank's share of format `fmt` (at most `max_batches` batches): tar shards
    split by file (rank r reads shards[r::W]) unless split="sampler"; the other formats, and the
    shards with split="sampler" (each sample a seek into its shard), through a shuffled
    DistributedSampler over all samples (order set by `seed`). cold=False: the files are read once,
    untimed, first, so that the pass finds them in the page cache."""
    info = meta(root)
    n = info["n"]
    paths = formats.files_of(fmt, root)
    if fmt == "shards" and split == "file-level":
        mine = sharding.shards_for_rank(paths, rank, world_size)
        ds = formats.dataset("shards", root, shards=mine)
        held = sum(min(info["per_shard"], n - paths.index(p) * info["per_shard"]) for p in mine)
        if not cold:
            measure.warm_up(mine)
        row = measure.read_rate(lambda: measure.loader(ds, batch_size, workers, prefetch), mine,
                                cold=cold, max_batches=max_batches, n_total=held)
        how = "file-level shards"
    else:
        from torch.utils.data.distributed import DistributedSampler
        ds = formats.ShardMembers(root) if fmt == "shards" else formats.dataset(fmt, root)
        sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank, shuffle=True,
                                     seed=seed)
        if not cold:
            measure.warm_up(paths)
        row = measure.read_rate(lambda: measure.loader(ds, batch_size, workers, prefetch, sampler),
                                paths, cold=cold, n_total=n, max_batches=max_batches)
        how = "DistributedSampler" if world_size > 1 else "shuffled"
    return dict(format=fmt, how=how, workers=workers, prefetch=prefetch if workers else "n/a",
                batch_size=batch_size, **row)


def read_formats(root, fmts=formats.FORMATS, batch_size: int = 128, workers: int = 0,
                 caches=("cold", "warm"), rounds: int = 3, max_batches: int | None = None) -> list[dict]:
    """Every format x cache state read in `rounds` interleaved rounds (`rounds.interleaved`), each
    pass at most `max_batches` batches in a new shuffled order; one row per set-up, its samples/s
    the mean over its passes with the 95 % interval over them. `asked` is the state asked for,
    `cache` the state mincore found before the passes."""
    configs = [(fmt, cache) for fmt in fmts for cache in caches]
    passes = rounds_.interleaved(configs, rounds, lambda c, r: dict(
        read_share(c[0], root, batch_size=batch_size, workers=workers, cold=c[1] == "cold", seed=r,
                   max_batches=max_batches), asked=c[1]))
    return rounds_.over_passes(passes)


def worker_sweep(root, fmt: str, workers=(0, 1, 2), prefetch=(2, 8), batch_size: int = 128,
                 cold: bool = True, rounds: int = 3, max_batches: int | None = None) -> list[dict]:
    """read_share over num_workers x prefetch_factor in `rounds` interleaved rounds, one row per
    set-up (mean over passes, 95 % interval over them). prefetch_factor means nothing without
    workers: num_workers=0 is one set-up, its prefetch "n/a"."""
    configs = [(w, None) if w == 0 else (w, pf) for w in workers for pf in (prefetch[:1] if w == 0 else prefetch)]
    passes = rounds_.interleaved(configs, rounds, lambda c, r: read_share(
        fmt, root, batch_size=batch_size, workers=c[0], prefetch=c[1], cold=cold, seed=r,
        max_batches=max_batches))
    return rounds_.over_passes(passes)


def stage(root, fmt: str, local_root, batch_size: int = 128, workers: int = 0, rounds: int = 3,
          max_batches: int | None = None) -> dict:
    """Copy format `fmt` to `local_root` (what a job script does to node-local disk), then cold
    passes from each place in `rounds` interleaved rounds (mean over passes, 95 % interval over
    them). The break-even compares whole-data-set passes (samples / mean samples/s)."""
    local_root = Path(local_root)
    shutil.rmtree(local_root / fmt, ignore_errors=True)
    copy = measure.copy_files(formats.files_of(fmt, root), root, local_root)
    (local_root / META).write_text((Path(root) / META).read_text())
    places = {"shared": root, "local": local_root}
    passes = rounds_.interleaved(list(places), rounds, lambda c, r: dict(read_share(
        fmt, places[c], batch_size=batch_size, workers=workers, cold=True, seed=r,
        max_batches=max_batches), place=c))
    shared, local = rounds_.over_passes(passes) if passes[0]["config"] == "shared" else \
        rounds_.over_passes(passes)[::-1]
    n = meta(root)["n"]
    return dict(format=fmt, n=n, copy=copy, shared=shared, local=local,
                break_even_epochs=None if copy["same_device"] else
                break_even(copy["seconds"], n / shared["samples_per_s"], n / local["samples_per_s"]))


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
              threads: int | None = None, rounds: int = 1) -> dict:
    """'model + pipeline' -> starve.timeline rows, for every model name and pipeline name. With
    rounds > 1 each run is cut into `rounds` pieces, and round r runs one piece of every run in
    rotated order (`rounds.rotated`), so a slow minute of the machine hits every run; each piece
    starts a fresh loader (its step 0, the time to the first batch, is left out like the run's)
    and continues the run's model and clock. Each row carries its piece, the share of the
    format's files in RAM before the piece (`resident_before`) and the 1-minute load average."""
    import torch
    makers = pipelines(root, names, batch_size)
    runs = [(m, n) for m in models for n in names]
    torch.manual_seed(seed)
    nets = {run: starve.MODELS[run[0]]() for run in runs}
    out = {f"{m} + {n}": [] for m, n in runs}
    per = [steps // rounds + (1 if k < steps % rounds else 0) for k in range(rounds)]
    for r in range(rounds):
        for m, n in rounds_.rotated(runs, r):
            resident = measure.resident_fraction(formats.files_of(n.split("/w")[0], root))
            load = rounds_.load_1m()
            rows = starve.timeline(makers[n](), nets[(m, n)], per[r], threads=threads)
            done = out[f"{m} + {n}"]
            shift = done[-1]["start"] + done[-1]["wait_s"] + done[-1]["compute_s"] if done else 0.0
            done += [dict(row, start=row["start"] + shift, piece=r, resident_before=resident,
                          load_1m=load) for row in rows]
    return out
