"""Lab 07: how fast can the training loop be fed? Fashion-MNIST written in four formats, read back.

Rank 0 writes the first --samples Fashion-MNIST training images (real data, never a stand-in) as
many small PNG files, as WebDataset-style tar shards, as one numpy memmap and as one HDF5 file
(dltutor.io.formats), unless --root holds them already. Then every rank reads its share of each
format through a DataLoader: the tar shards split by file (rank r opens shards r, r+W, ...) and/or
through a DistributedSampler over their samples (--shards-split), the other formats through a
shuffled DistributedSampler. Each rank reports samples/s, MB/s and
time-to-first-batch per format, and what the page cache held before the pass ('cold': the files
were dropped from RAM with posix_fadvise first; 'warm': they were not). Rank 0 gathers the sample
ids every rank read and reports whether each sample was read exactly once.

Launch forms (run in this lab's folder):
  python io_bench.py --tiny                                 # 1 process reads everything
  torchrun --nproc-per-node 2 io_bench.py --tiny            # 2 ranks: each reads its share
  torchrun --nproc-per-node 2 io_bench.py --formats shards --shards-split file-level,sampler
                                                            # sharding vs sampler, same files
  srun --ntasks 2 python io_bench.py --tiny                 # Slurm: one task per rank
  sbatch --ntasks 2 --wrap "srun python io_bench.py --tiny" # a batch job: srun starts the ranks
  torchrun --nnodes 2 --nproc-per-node 4 --rdzv-backend c10d \\
           --rdzv-endpoint $MASTER_ADDR:29500 io_bench.py --root /scratch/$USER/io   # 2 nodes
On several nodes --root must be a folder every node sees (the shared file system). From a notebook:
launch(dltutor.core.course.lab("07_io/io_bench.py"), nproc=2, args=["--tiny"]).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as tdist  # DDP:

from dltutor.core import dist, env, flags
from dltutor.core.device import hardware_label
from dltutor.core.tables import format_table
from dltutor.io import bench, formats, measure, sharding, source


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--samples", type=flags.positive_int, default=10000,
                   help="Fashion-MNIST training images to write (at most 60000)")
    p.add_argument("--formats", type=flags.choice_list(formats.FORMATS),
                   default=",".join(formats.FORMATS), help="comma-separated formats to read")
    p.add_argument("--root", default=None,
                   help="where the formats are written (default: your own folder, "
                        "<user_dir>/io_bench/n<samples>-s<per-shard>)")
    p.add_argument("--per-shard", type=flags.positive_int, default=512,
                   help="samples per tar shard (need at least one shard per rank)")
    p.add_argument("--batch-size", type=flags.positive_int, default=128, help="samples per batch")
    p.add_argument("--workers", type=flags.nonnegative_int, default=0,
                   help="DataLoader num_workers per rank (0: read in the training process)")
    p.add_argument("--prefetch", type=flags.positive_int, default=2,
                   help="DataLoader prefetch_factor: batches each worker prepares ahead")
    p.add_argument("--shards-split", type=flags.choice_list(SPLITS), default="file-level",
                   help="how the ranks share the tar shards: file-level (whole files per rank), "
                        "sampler (a DistributedSampler over their samples), or both, comma-separated")
    p.add_argument("--cache", choices=["cold", "warm"], default="cold",
                   help="cold: drop the files from the page cache before each read; warm: keep them")
    flags.add_tiny(p, {"samples": 512, "per_shard": 128, "batch_size": 64})
    args = flags.parse(p, argv)
    if args.samples > 60000:
        p.error(f"--samples {args.samples}: Fashion-MNIST has 60000 training images")
    return args


SPLITS = ("file-level", "sampler")


def passes(fmts, shard_splits):
    """(format, split) in the order read: the shards once per split asked, the rest by sampler."""
    return [(f, sp) for f in fmts for sp in (shard_splits if f == "shards" else ["sampler"])]


def gather_ids(ids, ctx):
    """Every rank's sample ids, on every rank (a single process: just its own)."""
    if not ctx.is_distributed:
        return [ids]
    everyone = [None] * ctx.world_size  # DDP:
    tdist.all_gather_object(everyone, ids)  # DDP:
    return everyone


def main(argv=None) -> int:
    args = parse_args(argv)
    with dist.session() as ctx:  # DDP: join the launcher's process group (none under python)
        root = Path(args.root or env.user_dir() / "io_bench" / f"n{args.samples}-s{args.per_shard}")
        if ctx.is_main:
            bench.prepare(root, args.samples, formats.FORMATS, args.per_shard)
        if ctx.is_distributed:
            tdist.barrier()  # DDP: the files exist before anyone reads
        rows = []
        for fmt, split in passes(args.formats, args.shards_split):
            if ctx.is_main and args.cache == "cold":
                measure.drop_cache(formats.files_of(fmt, root))
            if ctx.is_distributed:
                tdist.barrier()  # DDP: everyone starts from the same cache state
            row = bench.read_share(fmt, root, ctx.rank, ctx.world_size, args.batch_size,
                                   args.workers, args.prefetch, cold=False, split=split)
            cover = sharding.coverage(gather_ids(row.pop("ids"), ctx), args.samples)
            rows.append(dict(row, exactly_once=cover["exactly_once"],
                             repeated=len(cover["repeated"]), missing=len(cover["missing"])))
        dist.rank_print(format_table(rows, ["format", "how", "samples", "samples_per_s",
                                            "mb_per_s", "ttfb_s", "cache", "exactly_once"],
                                     title=f"rank {ctx.rank}/{ctx.world_size} reads "
                                           f"[{source.NAME}, {hardware_label()}]"))
        dist.report(reads=rows, root=str(root), samples_written=args.samples, data=source.NAME,
                    workers=args.workers, prefetch=args.prefetch, hardware=hardware_label())
    return 0


if __name__ == "__main__":
    sys.exit(main())
