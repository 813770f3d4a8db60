"""Lab 07_io from the kernel: start it on N ranks (dltutor.launch.run.launch) and turn each rank's
report into table rows."""
from __future__ import annotations

from dltutor.core.course import lab
from dltutor.launch.run import launch

LAB = "07_io/io_bench.py"


def run_lab(nproc: int, root, samples: int, per_shard: int, fmts=("shards", "files"),
            batch_size: int = 128, workers: int = 0, cache: str = "cold", timeout: float = 600,
            echo: bool = False, shard_splits=("file-level",)):
    """Lab 07_io on `nproc` local ranks over the formats already written under `root`;
    `shard_splits`: how the ranks share the tar shards ("file-level", "sampler" or both)."""
    args = ["--root", str(root), "--samples", str(samples), "--per-shard", str(per_shard),
            "--formats", ",".join(fmts), "--shards-split", ",".join(shard_splits),
            "--batch-size", str(batch_size),
            "--workers", str(workers), "--cache", cache]
    from dltutor.core.device import plan_ranks
    plan = plan_ranks([nproc], need=nproc)   # fewer GPUs than ranks: the ranks use the CPU
    return launch(lab(LAB), nproc=nproc, args=args, timeout=timeout, echo=echo, env=plan.env)


def rows(result) -> list[dict]:
    """One row per (rank, format) from a LaunchResult of the lab."""
    out = []
    for m in result.metrics:
        for r in m["reads"]:
            out.append(dict(rank=m["rank"], mode=r["how"], **{k: v for k, v in r.items()
                                                                if k != "how"}))
    return out
