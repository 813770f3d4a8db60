"""What `cost.measure`'s table (a cost.SaveCost: `.rows`, `.column(name)`, `.attrs`) shows, in
sentences and bars built from its numbers.

    findings(t)   -> sentences (dltutor.core.findings): per size, how long an async save blocks
                     the loop against a sync one and a page-cache save against an fsync'd one
                     (decided only where the 95 % intervals exclude each other), how the times
                     grow with the model, and the bytes on disk against 12 bytes per parameter
    plot(t, ax)   -> bars of the four timings per size with their 95 % intervals, titled
                     "... [CPU, gloo, 2 ranks, fast mode]"
"""
from __future__ import annotations

from dltutor.core.findings import compare, differs, fmt, trend

TIMES = ("page_cache", "fsync", "async_blocked", "async_total")
NAMES = {"page_cache": "sync save, page cache", "fsync": "sync save, fsync'd",
         "async_blocked": "async save, loop blocked", "async_total": "async save, until done"}
NOTES = ("the async saves ran on a gloo group of their own (dltutor.checkpoint.store.async_group) "
         "while the loop trained {k} step(s) per save with its collectives on the default group; on "
         "the default group that overlap hung in 2 of 2 runs in the course's measured notes on DCP over "
         "gloo (3 of 3 finished on a group of its own).")


def label(df) -> str:
    """'CPU, gloo, 2 ranks' (', fast mode' when the run was) for titles and sentences."""
    hw = "GPU, nccl" if df.attrs.get("hardware") == "GPU/nccl" else "CPU, gloo"
    return f"{hw}, {df.attrs.get('world_size')} ranks" + (", fast mode" if df.attrs.get("fast") else "")


def _size(row) -> str:
    return f"hidden {int(row['hidden'])} ({fmt(row['params'] / 1e6)} M parameters)"


def _vs(row, a: str, b: str) -> str:
    return compare(NAMES[a], row[f"{a}_s"], NAMES[b], row[f"{b}_s"], unit="s",
                   spread_a=row[f"{a}_ci"], spread_b=row[f"{b}_ci"])


def loop_sentence(row) -> str:
    """Which way of saving blocks the loop less, by how much; decided only outside the intervals."""
    a, s = row["async_blocked_s"], row["fsync_s"]
    if not differs(a, s, row["async_blocked_ci"], row["fsync_ci"]):
        return f"{_size(row)}: " + _vs(row, "async_blocked", "fsync")
    cheaper, by = ("async", s - a) if a < s else ("sync", a - s)
    return (f"{_size(row)}: {cheaper} is cheaper for the loop, by {fmt(by, 's')} per save; "
            + _vs(row, "async_blocked", "fsync"))


def _mb(n) -> str:
    return f"{n / 1e6:.4g} MB"


def bytes_sentence(row, wrap: str = "", world: int = 1) -> str:
    """The checkpoint's bytes beside 12·p, and what the difference is made of."""
    p, formula, disk = int(row["params"]), int(row["formula_bytes"]), int(row["ckpt_bytes"])
    tensors = int(row["tensor_bytes"])
    held = ("exactly 12·p" if tensors == formula else
            f"{tensors:,} bytes, {tensors - formula:+,} from 12·p")
    b = {k: f"{int(row[k]):,} B" for k in ("adam_steps", "rng", "pickled", "framing", "metadata")}
    parts = [f"{b['adam_steps']} of Adam step counts (one fp32 scalar per parameter tensor)",
             f"{b['rng']} of RNG state tensors (torch, numpy; each rank's)",
             f"{b['pickled']} of pickled values (step, data position, python's RNG state, the "
             "optimizer's hyperparameters)",
             f"{b['framing']} of framing (DCP writes each tensor as a torch.save record)",
             f"{b['metadata']} of .metadata"]
    once = (f" (the {world} DDP replicas are written once: DCP drops duplicates)"
            if wrap == "ddp" and world > 1 and int(row["weights"]) == 4 * p else "")
    return (f"{_size(row)}: {disk:,} bytes on disk ({_mb(disk)}) against notebook 04's model "
            f"states without gradients, 12 bytes per parameter in fp32 (weights 4 + Adam's two "
            f"moments 8): 12·{p:,} = {formula:,} ({_mb(formula)}). The weights and moments in the "
            f"checkpoint hold {held}{once}; the other {disk - formula:,} bytes "
            f"({(disk - formula) / formula:.2%} of the formula) are " + ", ".join(parts) + ".")


def findings(df) -> list[str]:
    """Sentences printed from `df` (cost.table / cost.measure): timings compared where the 95 %
    intervals allow, trends over the sizes, bytes against the formula, and how it was measured."""
    out, where = [], label(df)
    for row in df.rows:
        out.append(loop_sentence(row))
        out.append(f"{_size(row)}: the async save itself, in the background while the loop trained: "
                   + _vs(row, "async_total", "fsync")[:-1] + "; whether the steps it overlapped ran "
                   "slower is not measured here.")
        out.append(f"{_size(row)}: " + _vs(row, "page_cache", "fsync"))
    if len(df.rows) > 1:
        for t in ("fsync", "async_blocked"):
            out.append(trend(NAMES[t], [int(h) for h in df.column("hidden")], df.column(f"{t}_s"),
                             x_name="hidden", unit="s", spreads=df.column(f"{t}_ci")))
    if not any(differs(r["page_cache_s"], r["fsync_s"], r["page_cache_ci"], r["fsync_ci"]) for r in df.rows):
        out.append("At no size could this run tell a page-cache save from an fsync'd one: this machine's "
                   "disk acknowledged fsync about as fast as memory took the bytes; that is this disk's "
                   "result, and a parallel file system (Lustre, GPFS) behaves otherwise.")
    out += [bytes_sentence(row, df.attrs.get("wrap", ""), df.attrs.get("world_size", 1))
            for row in df.rows]
    fs = df.attrs.get("fs", "unknown")
    cache = ("fsync does nothing on tmpfs (RAM): here the fsync'd saves never reached a disk either"
             if fs == "tmpfs" else
             f"fsync returned for every file of the fsync'd saves ({fs}) before the clock stopped")
    n = min(df.column("fsync_n"))
    out.append(f"Measured on {where}, {n} repeats per size after {df.attrs.get('warmup')} warm-up "
               f"round(s), each repeat the slowest rank; page-cache saves (DCP's sync_files=False) end in "
               f"RAM; DCP's default writer fsyncs every file it writes, and {cache}; "
               + NOTES.format(k=df.attrs.get("overlap_steps")))
    return out


def plot(df, ax=None, title_label: str | None = None):
    """Grouped bars: the four timings per size, mean ± 95 % CI, log seconds; returns the axes."""
    import matplotlib.pyplot as plt
    import numpy as np
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    x, width = np.arange(len(df.rows)), 0.8 / len(TIMES)
    for i, t in enumerate(TIMES):
        ci = [0 if c != c else c for c in df.column(f"{t}_ci")]   # nan (one repeat): no bar
        ax.bar(x + (i - 1.5) * width, df.column(f"{t}_s"), width, yerr=ci, capsize=3, label=NAMES[t])
    ax.set_xticks(x, [f"h={int(h)}\n{p / 1e6:.2g} M params"
                      for h, p in zip(df.column("hidden"), df.column("params"))])
    ax.set_yscale("log")
    ax.set_ylabel("seconds per save (mean ± 95 % CI)")
    ax.set_title(f"Checkpoint save cost [{title_label or label(df)}]")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
