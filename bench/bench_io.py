"""Read throughput per on-disk format in one run: Fashion-MNIST as small PNG files, tar shards, a
numpy memmap and HDF5, each read cold (our files dropped from the page cache) and then warm, by one
process through a DataLoader. Prints samples/s, MB/s, time-to-first-batch and each format's speed
as a ratio to the small files in the same cache state (ratios, because absolute speeds depend on
the machine and on who else uses its disk).

    .venv/bin/python bench/bench_io.py                      (10000 samples, num_workers 0)
    .venv/bin/python bench/bench_io.py --samples 2000 --workers 2
"""
import argparse
import sys

from dltutor.core import env
from dltutor.core.device import hardware_label
from dltutor.core.tables import format_table
from dltutor.io import bench, source


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=10000)
    p.add_argument("--per-shard", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args(argv)
    root = bench.prepare(env.data_dir() / "io_bench" / f"n{args.samples}-s{args.per_shard}",
                         args.samples, per_shard=args.per_shard)
    print(format_table(bench.sizes(root), title=f"{source.NAME}, {args.samples} samples, {root}"))
    rows = bench.read_formats(root, batch_size=args.batch_size, workers=args.workers)
    base = {r["cache"]: r["samples_per_s"] for r in rows if r["format"] == "files"}
    for r in rows:
        r["vs_files"] = r["samples_per_s"] / base[r["cache"]]
    print(format_table(rows, ["format", "cache", "resident_before", "samples_per_s", "mb_per_s",
                              "ttfb_s", "vs_files"],
                       title=f"one pass, batch {args.batch_size}, num_workers {args.workers} "
                             f"[{source.NAME}, {hardware_label()}]"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
