"""Inside the kernel: launch the DeepSpeed labs of course/labs/04_deepspeed and turn what they
report into rows (one per config) that notebook 04 prints and plots.

    rows, result = sweep(["zero0", "zero3"], nproc=2, sizes=dict(num_layers=2, h_dim=64))
    oom = run_plain_under_budget(sizes, budget_mb=320)   # never raises: the OOM is the result
    fsdp_row, result = run_fsdp2(nproc=2, sizes=sizes)    # PyTorch FSDP2, same model and sizes
    nvme_summary(row, result, sizes)   # what the NVMe run kept in RAM, and why (lines to print)

Memory in a row is per rank (rank 0), in MiB: `params_MiB` / `grads_MiB` / `optimizer_MiB` /
`measured` are the model-state bytes the rank really held (dltutor.zero.memory.ModelStateMeter),
`predicted` the formula's M_m + M_o + M_g for the same stage and d; `peak_rss` the process
high-water mark; `samples_per_s` the mean of the per-step rates of the steady timed steps (the
first timed step, which also runs the memory meter, left out: METER_STEPS) and
`samples_per_s_spread` its 95 % confidence interval (`core.spread.rate_ci`; nan below 2 steps);
`samples_per_s_lab` the rate the lab printed (all timed steps, meter step included); rows are made
in dltutor.zero.rows, and `sweep` with `rounds` > 1 takes the speed over its rotated rounds
(dltutor.zero.rounds).
"""
from __future__ import annotations

import contextlib
import json
import math
import re
from pathlib import Path

from dltutor.core import course
from dltutor.core.units import MiB
from dltutor.zero import bert_lab, swap_buffers
from dltutor.zero.rows import LABELS, METER_STEPS, rate_spread, row_of  # noqa: F401 (re-exported)
from dltutor.zero.rounds import paired_ratio, rows_over_rounds
from dltutor.core.engines import clear_stale_deepspeed_shm, engine_env
from dltutor.launch.results import LaunchError
from dltutor.launch.run import launch
from dltutor.zero.budget import is_out_of_memory


def size_flags(sizes: dict) -> list[str]:
    """{'num_layers': 6, ...} -> ['--num_layers', '6', ...] (the labs' flags)."""
    out = []
    for key, value in sizes.items():
        out += [f"--{key}", str(value)]
    return out


def _args(config: str, sizes: dict, budget_mb=None, nvme_dir=None) -> list[str]:
    args = size_flags(sizes)
    if budget_mb:
        args += ["--mem-budget-mb", str(budget_mb)]
    if config != "plain":
        args += ["--deepspeed_config", str(course.lab(f"04_deepspeed/configs/{config}.json"))]
    if nvme_dir:
        args += ["--nvme_path", str(nvme_dir)]
    return args


def _ds_env(env=None) -> dict:
    """The DeepSpeed ranks' variables, after clearing shared memory that a killed run left behind."""
    stale = clear_stale_deepspeed_shm()
    if stale:
        print(f"removed {len(stale)} DeepSpeed shared-memory buffer(s) left by a killed run: "
              f"{', '.join(stale)}")
    return {**engine_env(), **(env or {})}


def run_config(config: str, nproc: int, sizes: dict, budget_mb=None, nvme_dir=None,
               timeout: float = 900, log_dir=None, env=None):
    """Launch train_bert_ds.py (or train_bert.py for 'plain') once; (row of rank 0, result).

    `env` adds variables for the ranks (e.g. dltutor.core.device.RankPlan.env: the CPU)."""
    script = course.lab("04_deepspeed/" + ("train_bert.py" if config == "plain" else "train_bert_ds.py"))
    # a budget is calibrated at one thread per rank (thread pools and malloc arenas grow with the
    # threads, so a 16-core node would spend it before the model does)
    res = launch(str(script), nproc=nproc, args=_args(config, sizes, budget_mb, nvme_dir),
                 env=_ds_env(env), echo=False, timeout=timeout, log_dir=log_dir,
                 threads=1 if budget_mb else None)
    return row_of(res.metrics[0], config, nproc), res


def run_fsdp2(nproc: int, sizes: dict, timeout: float = 900, log_dir=None, env=None):
    """train_bert_fsdp.py (PyTorch FSDP2) with the ZeRO runs' sizes; (row of rank 0, result)."""
    res = launch(str(course.lab("04_deepspeed/train_bert_fsdp.py")), nproc=nproc,
                 args=size_flags(sizes), env=env, echo=False, timeout=timeout, log_dir=log_dir)
    return row_of(res.metrics[0], "fsdp2", nproc), res


def sweep(configs, nproc: int, sizes: dict, rounds: int = 1, timeout: float = 900, log_dir=None,
          env=None):
    """All `configs` in ONE launch of sweep_zero.py (no budget), each `rounds` times in rotated
    order; (rows in order, result). Speeds over the rounds: dltutor.zero.rounds. `timeout` is per
    round (a loaded machine slows every round alike)."""
    args = ["--configs", ",".join(configs), "--rounds", str(rounds)] + size_flags(sizes)
    res = launch(str(course.lab("04_deepspeed/sweep_zero.py")), nproc=nproc, args=args,
                 env=_ds_env(env),
                 echo=False, timeout=timeout * max(1, rounds), log_dir=log_dir)
    return rows_over_rounds(res.metrics, configs, nproc), res


def _log_text(result) -> str:
    if result is None:
        return ""
    return "\n".join(Path(p).read_text(errors="replace") for p in result.logs.values()
                     if Path(p).is_file())


def allocator_lines(text: str) -> list[str]:
    """The lines of a log that carry the out-of-memory error (ours and the allocator's)."""
    return [ln.strip() for ln in text.splitlines()
            if is_out_of_memory(ln) or "OUT OF MEMORY during" in ln]


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\s*$')


def traceback_frames(text: str) -> list[dict]:
    """The frames of the last traceback in a log, innermost last: file, line, func, code."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.strip() == "Traceback (most recent call last):"]
    frames = []
    for i in range(starts[-1] + 1 if starts else len(lines), len(lines)):
        m = _FRAME.match(lines[i])
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            frames.append(dict(file=m.group(1), line=int(m.group(2)), func=m.group(3),
                               code="" if code.startswith(("File ", "^", "~")) else code))
    return frames


def run_plain_under_budget(sizes: dict, budget_mb: float, timeout: float = 900, env=None) -> dict:
    """train_bert.py on 1 process under the OS-enforced budget. Never raises on failure.

    Returns {ok, oom, lines (the OOM lines of the log), frames (its last traceback,
    `traceback_frames`), error (first line of the LaunchError), log (path of rank 0's log),
    row (when it trained after all)}.
    """
    try:
        row, res = run_config("plain", 1, sizes, budget_mb=budget_mb, timeout=timeout, env=env)
        return dict(ok=True, oom=False, lines=[], frames=[], error=None, log=str(res.logs.get(0)),
                    row=row)
    except LaunchError as err:
        text = _log_text(err.result) or str(err)
        log = str(err.result.logs.get(0)) if err.result is not None else None
        return dict(ok=False, oom=is_out_of_memory(text), lines=allocator_lines(text),
                    frames=traceback_frames(text), error=str(err).splitlines()[0], log=log, row=None)


def deepspeed_log_table(result, rank: int = 0) -> list[dict]:
    """DeepSpeed's own progress lines in one rank's log, parsed (bert_lab.parse_deepspeed_log)."""
    path = Path(result.logs[rank])
    return bert_lab.parse_deepspeed_log(path.read_text(errors="replace"))


def with_speed_ratio(rows: list[dict], base: str = "zero0") -> list[dict]:
    """Add `speed_vs_stage0` and `memory_vs_stage0` (ratios to the `base` config's row). With
    rounds the speed ratio is the one the verdict uses, paired within each round
    (`rounds.paired_ratio`: geometric mean) and `speed_ci95` its 95 % interval; with one round
    the ratio of the two means (no interval)."""
    ref = next((r for r in rows if r["config"] == base), None)
    for r in rows:
        paired = paired_ratio(r, ref) if ref and r is not ref else None
        if paired:
            r["speed_vs_stage0"], r["speed_ci95"] = paired["ratio"], (paired["lo"], paired["hi"])
        else:
            r["speed_vs_stage0"] = (r["samples_per_s"] / ref["samples_per_s"]
                                    if ref and r["samples_per_s"] and ref["samples_per_s"] else None)
            r["speed_ci95"] = None
        r["memory_vs_stage0"] = r["measured"] / ref["measured"] if ref and ref["measured"] else None
    return rows


def budget_rows(oom: dict, runs) -> list[dict]:
    """One row per run under the memory budget: the plain run (from `run_plain_under_budget`), then
    each `(name, row)` of `runs` (rows from `run_config`), with formula vs held model-state MiB."""
    params = next((r["params"] for _, r in runs if "params" in r), None)
    rows = [dict(run="plain PyTorch, 1 process", ranks=1,
                 result="OUT OF MEMORY" if oom["oom"] else "trained",
                 formula_MiB=round(16 * params / MiB) if params else "-", held_MiB="-")]
    for name, r in runs:
        rows.append(dict(run=name, ranks=r["ranks"], result="trained",
                         formula_MiB=round(r["predicted"]), held_MiB=round(r["measured"])))
    return rows


_NVME_NOTE = "NVMe offload:"
_LEAN = re.compile(r"(\d+) parameter buffer\(s\), optimizer sub-groups of ([\d,]+) elements")
_MODEL_KEYS = ("num_layers", "h_dim", "ff_dim", "num_heads", "vocab", "seq_len")


def nvme_note(result, rank: int = 0) -> str | None:
    """The lab's "NVMe offload: ..." line in a rank's log (dltutor.zero.swap_buffers.fit prints
    it when it shrank the swap buffers or raised the locked-memory limit); None without one."""
    path = Path(result.logs.get(rank, ""))
    text = path.read_text(errors="replace") if path.is_file() else ""
    line = next((ln for ln in text.splitlines() if _NVME_NOTE in ln), None)
    return line[line.index(_NVME_NOTE):].strip() if line else None


def _no_note() -> str:
    soft, _ = swap_buffers.locked_limit()
    return ("the lab printed no 'NVMe offload:' line, so the swap buffers kept the sizes it picks "
            "for speed: they fit the locked-memory limit (this kernel's `ulimit -l`, which the "
            "ranks inherit: " + ("unlimited" if soft is None else f"{soft / MiB:.3g} MiB") + ")")


def swap_kinds(files) -> str:
    """The swap files by what DeepSpeed wrote into them, from their names: "... of gradients, ..."."""
    grads = [f for f in files if "_gradient_" in Path(f).name]
    size = sum(Path(f).stat().st_size for f in grads if Path(f).exists()) / MiB
    return (f"{len(grads)} of them ({size:.0f} MiB) fp32 gradients of swapped parameters, "
            f"{len(files) - len(grads)} parameters and Adam's state")


def nvme_summary(row: dict, result, sizes: dict, config: str = "zero3_offload_nvme") -> list[str]:
    """What the NVMe run kept in RAM and why: the lab's swap-buffer line (or the limit), the
    parameters DeepSpeed never swaps (under one aio block), the swap buffers, and where Adam's
    state went (per optimizer sub-group), from its log, its metrics and the model's tensor sizes."""
    note = nvme_note(result)
    aio = json.loads(course.lab(f"04_deepspeed/configs/{config}.json").read_text()).get("aio", {})
    block = max(MiB, int(aio.get("block_size", MiB)))        # DeepSpeed's min_aio_bytes
    elem = 4 if row.get("dtype", sizes.get("dtype")) == "fp32" else 2
    numels = swap_buffers.param_numels({k: sizes[k] for k in _MODEL_KEYS if k in sizes})
    parts = [math.ceil(n / (row.get("ranks") or 1)) for n in numels]
    small = [n for n in parts if n * elem < block]
    resident = sum(small) * elem / MiB
    lean = _LEAN.search(note or "")
    count, group = ((int(lean.group(1)), int(lean.group(2).replace(",", ""))) if lean
                    else (swap_buffers.FAST_PARAM_BUFFERS, max(numels)))
    buffer_mib = max(parts) * elem / MiB
    groups = [sum(parts[i] for i in g) for g in swap_buffers.sub_groups(parts, group)]
    kept = [n for n in groups if n * 4 < block]                # fp32 state per sub-group
    adam = (f"Adam's state: {len(groups)} optimizer sub-group(s) of the flat fp32 partition, "
            + ("all at least one I/O block: all of it is swapped to disk." if not kept else
               f"{len(kept)} under one I/O block: their fp32 weights and moments "
               f"({12 * sum(kept) / MiB:.2f} MiB) stay in RAM, the rest is on disk."))
    return [f"the lab's line: {note}" if note else f"swap buffers: {_no_note()}",
            f"in RAM, parameters {row['params_MiB']:.1f} MiB: the {len(small)} tensors under one "
            f"I/O block ({block / MiB:g} MiB), {resident:.1f} MiB, which DeepSpeed never swaps, and "
            f"{row['params_MiB'] - resident:.2f} MiB of parameters in swap buffers ({count} "
            f"buffer(s) of {buffer_mib:.2f} MiB as sized); gradients {row['grads_MiB']:.0f} MiB "
            f"(DeepSpeed's fp32 partition is 4 p = {4 * sum(parts) / MiB:.0f} MiB of it); optimizer "
            f"{row['optimizer_MiB']:.0f} MiB.",
            adam]


def speed_table(rows: list[dict]) -> list[dict]:
    """The rows for section 4's table: `speed_ci95` as text ("lo-hi", the interval the verdict
    uses; "" for the reference or without rounds)."""
    return [dict(r, speed_ci95=f"{r['speed_ci95'][0]:.3f}-{r['speed_ci95'][1]:.3f}"
                 if r.get("speed_ci95") else "") for r in rows]


def swap_medium(path) -> str:
    """Where the swap files went: the file system and device that hold `path` (/proc/mounts,
    longest mount point above it), and what that means for the timing."""
    path, best = str(Path(path).resolve()), ("?", "?", "/")
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fs = line.split()[:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[2]):
                best = (dev, fs, mnt)
    return (f"swap folder on {best[1]} ({best[0]}, mounted at {best[2]}): the files go through the "
            f"page cache, so with free RAM they need never reach that device during the run; this "
            f"shows the mechanism, not the I/O cost of a real out-of-core run.")


def deepspeed_log_note(ds_log: list[dict], row: dict) -> str:
    """DeepSpeed's RunningAvgSamplesPerSec beside the lab's own samples/s of the same run."""
    rates = [r["RunningAvgSamplesPerSec"] for r in ds_log if r.get("RunningAvgSamplesPerSec")]
    lab = row.get("samples_per_s_lab")
    if not rates or not lab:
        return "No rate to set beside the lab's: DeepSpeed logged none here or the lab timed none."
    return (f"MemAllocated in GiB of process RSS (CPU accelerator). DeepSpeed's "
            f"RunningAvgSamplesPerSec {min(rates):.2f}-{max(rates):.2f} vs the lab's "
            f"{lab:.2f} samples/s for the same run: DeepSpeed's timer covers its own window of "
            f"each step (and starts after its own first steps), the lab times whole steps.")
