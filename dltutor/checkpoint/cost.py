"""What a checkpoint costs: save seconds (sync, async), the time the loop is blocked, bytes on disk.

    t = cost.measure(nproc=2)             # lab 10's save_cost.py on 2 ranks -> a SaveCost table
    t; t.bytes_table()                    # HTML tables (dltutor.core.tables): seconds, bytes
    cost.findings(t)                      # sentences printed from its numbers (cost_report.py)
    cost.plot(t)                          # bars, labelled "CPU, gloo, 2 ranks[, fast mode]"

One row per model size (the lab's MLP at a hidden width): the mean and 95 % interval
(dltutor.core.spread.mean_ci, warm-up left out) of four timings, each the slowest rank's:
  page_cache     a sync save with DCP's sync_files=False: done when the bytes are in the OS's page
                 cache (RAM), not on the disk: a lower bound
  fsync          a sync save with DCP's default writer, which fsyncs every file it writes (the
                 shards, .metadata), and the step folder fsync'd too before the clock stops
  async_blocked  store.save_async until it returns: the copy of the state to CPU memory, all the
                 training loop waits for
  async_total    from that call until the save (fsync'd, like `fsync`) is done, while the loop
                 goes on training on the default group (the save runs on its own gloo group)
and the bytes on disk (`checkpoint_bytes`) beside notebook 04's model-state formula: in fp32
without a master copy, weights k·p + Adam's two moments 2·k·p with k = 4, so 12 bytes per
parameter (dltutor.zero.memory.estimate_zero_memory(p, k_l=4, k_h=4).M_m + .M_o; its M_g, the
gradients, is not saved).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from dltutor.checkpoint.cost_report import NAMES, TIMES, findings, label, plot  # noqa: F401 (the API)
from dltutor.core import env
from dltutor.core.spread import mean_ci
from dltutor.core.tables import Table

LAB = "10_checkpoint/save_cost.py"
BYTES = ("weights", "moments", "adam_steps", "rng", "pickled", "framing", "metadata")
TIME_COLUMNS = ["hidden", "params"] + [f"{t}_{s}" for t in TIMES for s in ("s", "ci")]
BYTE_COLUMNS = ["hidden", "params", "ckpt_bytes", "formula_bytes", "extra_bytes", *BYTES]
BYTES_PER_PARAM = 4 + 2 * 4     # fp32 weights + Adam's exp_avg and exp_avg_sq (no gradients)


def formula_bytes(params: int) -> int:
    """Notebook 04's model states without gradients, fp32, no master copy: M_m + M_o = 12·p."""
    return BYTES_PER_PARAM * int(params)


def fs_type(path) -> str:
    """The type of the file system holding `path` ('ext4', 'tmpfs', ...; 'unknown' off Linux)."""
    real, best = os.path.realpath(path), ("", "unknown")
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                _, point, kind = line.split()[:3]
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best[0]):
                    best = (point, kind)
    except OSError:
        pass
    return best[1]


def fsync_folder(path) -> None:
    """fsync the folder itself (its directory entries: the files' names), as files are fsync'd."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _kind(fqn: str) -> str:
    """Which part of the checkpoint a DCP key belongs to (see BYTES)."""
    if fqn.startswith("app.model."):
        return "weights"
    if fqn.endswith((".exp_avg", ".exp_avg_sq")):
        return "moments"
    if fqn.startswith("app.optimizer.state.") and fqn.endswith(".step"):
        return "adam_steps"
    return "rng" if fqn.startswith("app.rng.") else "pickled"


def checkpoint_bytes(path) -> dict:
    """The bytes of a DCP checkpoint folder, read from its .metadata: each tensor's data
    (weights, moments, adam_steps, rng: numel x element size), the framing around it (DCP writes
    each item as a torch.save record), the pickled values (step, data position, the optimizer's
    hyperparameters, python's RNG state: their whole records), .metadata itself; `files` is what
    the folder's files take (their sizes), `params` the number of weights."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    meta = dcp.FileSystemReader(str(path)).read_metadata()
    out = dict.fromkeys(BYTES, 0)
    out["params"] = 0
    for fqn, item in meta.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            numel = item.size.numel()
            out[_kind(fqn)] += numel * item.properties.dtype.itemsize
            out["params"] += numel if _kind(fqn) == "weights" else 0
    stored = {}
    for index, info in meta.storage_data.items():
        stored[index.fqn] = stored.get(index.fqn, 0) + info.length
    tensors = {k for k, v in meta.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}
    data = sum(out[k] for k in ("weights", "moments", "adam_steps", "rng"))
    out["framing"] = sum(n for k, n in stored.items() if k in tensors) - data
    out["pickled"] = sum(n for k, n in stored.items() if k not in tensors)
    out["metadata"] = (Path(path) / ".metadata").stat().st_size
    out["files"] = sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())
    out["indexed"] = sum(stored.values()) + out["metadata"]   # == files: nothing else on disk
    return out


def _slowest(per_rank: list[list[float]]) -> list[float]:
    """Each repeat's slowest rank (the loop goes on when the last rank does)."""
    return [max(vals) for vals in zip(*per_rank)]


class SaveCost(Table):
    """`cost.table`'s result: `rows` (one dict per size: TIME_COLUMNS, BYTE_COLUMNS and more),
    `attrs` (hardware, world_size, fs, wrap, warmup, overlap_steps, fast; wall_s from `measure`).
    Shown, it is the timings' table (HTML in Jupyter); `bytes_table()` is the bytes'."""

    def __init__(self, rows: list[dict], attrs: dict):
        self.attrs = dict(attrs)
        heads = {f"{t}_s": f"{NAMES[t]} (s)" for t in TIMES}
        heads.update({f"{t}_ci": "± (s)" for t in TIMES}, params="parameters")
        super().__init__(rows, TIME_COLUMNS, title=f"Seconds per checkpoint save [{label(self)}]",
                         headers=heads, note="mean and ± (half-width of the 95 % CI) over the repeats, "
                                             "each the slowest rank's")

    def column(self, name: str) -> list:
        return [r[name] for r in self.rows]

    def bytes_table(self) -> Table:
        heads = {"params": "parameters", "ckpt_bytes": "bytes on disk", "formula_bytes": "12 x parameters",
                 "extra_bytes": "difference"}
        return Table(self.rows, BYTE_COLUMNS, title=f"Checkpoint bytes on disk [{label(self)}]", headers=heads,
                     note="formula_bytes: 12 bytes per parameter (fp32 weights + Adam's 2 moments)")


def table(metrics: list[dict], fast: bool = False) -> SaveCost:
    """The lab's metrics (one dict per rank) as a SaveCost: one row per hidden width, TIMES as
    mean and ± (`<t>_s`, `<t>_ci`, over repeats of the slowest rank), the bytes from rank 0."""
    ranks = sorted(metrics, key=lambda m: m["rank"])
    rows = []
    for i, size in enumerate(ranks[0]["sizes"]):
        row = {"hidden": size["hidden"], "params": size["params"]}
        for t in TIMES:
            xs = _slowest([m["sizes"][i][t] for m in ranks])
            row[f"{t}_s"], row[f"{t}_ci"] = sum(xs) / len(xs), mean_ci(xs)
            row[f"{t}_n"] = len(xs)
        b = size["bytes"]
        row.update(ckpt_bytes=b["files"], formula_bytes=formula_bytes(size["params"]),
                   tensor_bytes=b["weights"] + b["moments"], indexed_bytes=b["indexed"],
                   **{k: b[k] for k in BYTES})
        row["extra_bytes"] = row["ckpt_bytes"] - row["formula_bytes"]
        rows.append(row)
    first = ranks[0]
    return SaveCost(rows, dict(hardware=first["hardware"], world_size=first["world_size"],
                               fs=first["fs"], wrap=first["wrap"], warmup=first["warmup"],
                               overlap_steps=first["overlap_steps"], fast=bool(fast)))


def measure(nproc: int = 2, sizes=None, repeats: int | None = None, fast: bool | None = None,
            ckpt_dir=None, wrap: str = "ddp", timeout: float = 600, echo: bool = False,
            launcher=None) -> SaveCost:
    """Run the lab on `nproc` ranks and return `table(...)` with `attrs["wall_s"]`. `sizes`: hidden
    widths (default: the lab's, --tiny's in fast mode); `ckpt_dir`: where it saves (default: a
    folder under the runs folder, on the disk); `launcher`: dltutor.launch.run.launch or alike."""
    from dltutor.core.course import lab
    if launcher is None:
        from dltutor.launch.run import launch as launcher
    fast = env.fast_mode() if fast is None else fast
    root = Path(ckpt_dir or env.runs_dir() / f"save-cost-{os.getpid()}-{time.time_ns()}")
    args = ["--ckpt-dir", str(root), "--wrap", wrap] + (["--tiny"] if fast else [])
    args += ["--hidden", ",".join(map(str, sizes))] if sizes else []
    args += ["--repeats", str(repeats)] if repeats else []
    t0 = time.perf_counter()
    result = launcher(str(lab(LAB)), nproc=nproc, args=args, timeout=timeout, echo=echo)
    out = table(result.metrics, fast)
    out.attrs["wall_s"] = time.perf_counter() - t0
    return out
