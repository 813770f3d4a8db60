"""What the two BERT labs of course/labs/04_deepspeed share: flags, the DeepSpeed config loader,
the measured-memory report and the out-of-memory message.

Kept here (not copied between train_bert.py and train_bert_ds.py), as the course's design asks.
"""
from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from dltutor.core import flags

NVME_ENV = "DLTUTOR_NVME_DIR"
TINY = dict(num_layers=2, h_dim=64, ff_dim=256, num_heads=4, vocab=512, seq_len=16,
            batch_size=2, num_iterations=4)
DTYPES = ("fp32", "bf16", "fp16")


class ConfigError(ValueError):
    """A DeepSpeed config that is missing, not JSON, or incomplete — one clear sentence."""


def parser(description: str, deepspeed: bool = False) -> argparse.ArgumentParser:
    """The seed's flags (defaults are the seed's 2.5B model) plus --tiny and the memory budget."""
    p = flags.parser(description)
    p.add_argument("--num_layers", type=flags.positive_int, default=192)
    p.add_argument("--h_dim", type=flags.positive_int, default=1024)
    p.add_argument("--ff_dim", type=flags.positive_int, default=4096)
    p.add_argument("--num_heads", type=flags.positive_int, default=16)
    p.add_argument("--vocab", type=flags.positive_int, default=30522)
    p.add_argument("--seq_len", type=flags.positive_int, default=128)
    p.add_argument("--batch_size", type=flags.positive_int, default=1, help="micro-batch per rank")
    p.add_argument("--num_iterations", type=flags.positive_int, default=10)
    p.add_argument("--dtype", choices=("auto",) + DTYPES, default="auto",
                   help="auto: mixed precision on GPUs (fp32 master weights, bf16 on compute "
                        "capability >= 8.0, else fp16 with loss scaling), fp32 on CPUs")
    p.add_argument("--lr", type=flags.positive_float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint_dir", default=None, help="save a checkpoint here at the end")
    p.add_argument("--mem-budget-mb", dest="mem_budget_mb", type=flags.positive_float, default=None,
                   help="OS-enforced per-process budget (RLIMIT_DATA) above the memory the "
                        "process holds after start-up; default $DLTUTOR_MEM_BUDGET_MB")
    p.add_argument("--measure_iter", type=flags.nonnegative_int, default=1,
                   help="iteration (0-based) whose model-state bytes are sampled")
    flags.add_tiny(p, TINY, "CI sizes")
    if deepspeed:
        p.add_argument("--deepspeed_config", required=True, type=flags.deepspeed_config, help="a JSON file from configs/")
        p.add_argument("--nvme_path", default=None,
                       help=f"scratch dir for ZeRO-Infinity NVMe offload (default ${NVME_ENV})")
        p.add_argument("--resume", action="store_true",
                       help="load the latest checkpoint in --checkpoint_dir and continue")
        p.add_argument("--resume_tag", default=None, help="resume from this tag, not the latest")
        p.add_argument("--save_interval", type=flags.nonnegative_int, default=0,
                       help="also save every N iterations (0: only at the end)")
        p.add_argument("--ds_log_level", default="info",
                       choices=("debug", "info", "warning", "error"),
                       help="DeepSpeed's log level once training starts (info: its progress "
                            "lines every steps_per_print steps)")
        p.add_argument("--local_rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p


def parse(p: argparse.ArgumentParser, argv=None):
    """Parse (--tiny fills the sizes you did not give); the model must divide evenly into heads."""
    args = flags.parse(p, argv)
    if args.h_dim % args.num_heads:
        p.error(f"--h_dim {args.h_dim} must be a multiple of --num_heads {args.num_heads}")
    return args


def rank_batch(args, ctx, step: int, device):
    """This rank's synthetic masked-LM batch for `step`: every rank draws its own (its data shard)."""
    from dltutor.zero.bert import synthetic_mlm_batch
    return synthetic_mlm_batch(args.batch_size, args.seq_len, args.vocab,
                               step=step * ctx.world_size + ctx.rank, seed=args.seed, device=device)


def resolve_dtype(args, dev=None) -> str:
    """--dtype auto -> the precision of `dev` (default: this rank's device): fp32 on the CPU; on a
    GPU bf16 at compute capability >= 8.0, else fp16 (dltutor.core.device.training_precision).
    fp16/bf16 always mean mixed precision: fp32 master weights, low-precision compute."""
    if args.dtype == "auto":
        from dltutor.core.device import device, training_precision
        args.dtype = training_precision(device() if dev is None else dev)
    return args.dtype


def torch_dtype(name: str):
    """'fp32' / 'bf16' / 'fp16' -> the torch dtype."""
    import torch
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def mixed_precision(args, dev):
    """(autocast factory or None, GradScaler) for the plain lab's `train_step`, from --dtype.

    The parameters and Adam stay fp32 (the master copy, as in the seed's formula); forward and
    backward run in bf16/fp16 under torch.autocast; fp16 gets a GradScaler (dynamic loss scale,
    saved in the checkpoint), bf16 and fp32 an inactive one."""
    from dltutor.core.device import autocast, grad_scaler
    dtype = torch_dtype(resolve_dtype(args, dev))
    low = args.dtype != "fp32"
    factory = (lambda: autocast(dev, dtype=dtype)) if low else None
    return factory, grad_scaler(dev, enabled=low, dtype=dtype)


def ds_precision(dtype: str) -> dict:
    """DeepSpeed's 'fp16' / 'bf16' config sections for `dtype` (its engine keeps fp32 masters)."""
    return {"fp16": {"enabled": dtype == "fp16", "initial_scale_power": 16},
            "bf16": {"enabled": dtype == "bf16"}}


def model_flags(args) -> dict:
    return dict(num_layers=args.num_layers, h_dim=args.h_dim, ff_dim=args.ff_dim,
                num_heads=args.num_heads, vocab=args.vocab, seq_len=args.seq_len)


def load_ds_config(path, args) -> dict:
    """Read a DeepSpeed JSON config and fill what depends on the run: batch, dtype, NVMe path.

    "auto" batch -> --batch_size; "auto" buckets -> about the largest parameter; NVMe swap
    buffers -> sized to this process's locked-memory limit (dltutor.zero.swap_buffers);
    "${DLTUTOR_NVME_DIR}" -> --nvme_path or $DLTUTOR_NVME_DIR. Raises ConfigError.
    """
    path = Path(path) if path else None
    if path is None or not path.is_file():
        raise ConfigError(f"DeepSpeed config {str(path)!r} not found; pass --deepspeed_config "
                          "with one of course/labs/04_deepspeed/configs/*.json")
    text = path.read_text()
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"DeepSpeed config {str(path)!r} is not valid JSON: {exc.msg} at "
                          f"line {exc.lineno} column {exc.colno}") from None
    if not isinstance(cfg, dict) or "zero_optimization" not in cfg:
        raise ConfigError(f"DeepSpeed config {str(path)!r} has no 'zero_optimization' section "
                          "(expected an object like {\"zero_optimization\": {\"stage\": 3}})")
    if cfg.get("train_micro_batch_size_per_gpu", "auto") == "auto":
        cfg["train_micro_batch_size_per_gpu"] = args.batch_size
    cfg.pop("train_batch_size", None)
    cfg.update(ds_precision(resolve_dtype(args)))
    zero = cfg["zero_optimization"]
    fit_swap_buffers(zero, cfg.get("aio") or {}, args)
    largest = max(args.vocab * args.h_dim, args.h_dim * args.ff_dim, 3 * args.h_dim ** 2)
    # "auto" buckets hold about one weight matrix: small models stay small, big ones stay fast
    for key, factor in (("reduce_bucket_size", 1), ("allgather_bucket_size", 1),
                        ("stage3_prefetch_bucket_size", 1), ("stage3_max_live_parameters", 2),
                        ("sub_group_size", 1)):
        if zero.get(key) == "auto":
            zero[key] = int(factor * largest)
    for key in ("offload_param", "offload_optimizer"):
        off = zero.get(key) or {}
        if off.get("buffer_size") == "auto":
            off["buffer_size"] = int(largest)
        if "${" in str(off.get("nvme_path", "")):
            nvme = getattr(args, "nvme_path", None) or os.environ.get(NVME_ENV)
            if not nvme:
                raise ConfigError(f"DeepSpeed config {str(path)!r} offloads to NVMe: give a "
                                  f"scratch directory with --nvme_path or ${NVME_ENV}")
            os.makedirs(nvme, exist_ok=True)
            off["nvme_path"] = nvme
    return cfg


def fit_swap_buffers(zero: dict, aio: dict, args) -> None:
    """NVMe offload: fill the "auto" swap-buffer sizes so DeepSpeed's page-locked buffers fit
    this rank's `ulimit -l` (printing one line when they had to shrink or the limit was raised);
    ConfigError, before DeepSpeed starts, when even the least buffers do not fit."""
    from dltutor.core.dist import detect
    from dltutor.zero import swap_buffers
    param_bytes = 2 if args.dtype in ("bf16", "fp16") else 4
    try:
        note = swap_buffers.fit(zero, aio, model_flags(args), param_bytes,
                                world_size=detect().get("world_size") or 1)
    except swap_buffers.LockedMemoryError as exc:
        raise ConfigError(str(exc)) from None
    if note:
        print(note, flush=True)


def offload_mode(cfg: dict) -> str:
    zero = cfg.get("zero_optimization", {})
    devs = {(zero.get(k) or {}).get("device", "none") for k in ("offload_param",
                                                                 "offload_optimizer")}
    return "nvme" if "nvme" in devs else "cpu" if "cpu" in devs else "none"


def ops_used(cfg: dict) -> list[str]:
    """DeepSpeed's compiled ops a run with `cfg` loads (dltutor.core.engines.DEEPSPEED_OPS names):
    the shared-memory collectives of its CPU accelerator, cpu_adam for an optimizer offloaded to
    the CPU or NVMe, async_io and pin_memory for NVMe."""
    mode, zero = offload_mode(cfg), cfg.get("zero_optimization", {})
    opt_dev = (zero.get("offload_optimizer") or {}).get("device", "none")
    return (["deepspeed_shm_comm"] + (["cpu_adam"] if opt_dev in ("cpu", "nvme") else [])
            + (["async_io", "pin_memory"] if mode == "nvme" else []))


def nvme_problem(cfg: dict) -> str | None:
    """None, or why an NVMe-offload run cannot work on this node: DeepSpeed's async_io op needs
    libaio, and without it DeepSpeed would still try to compile it (and its pin_memory op) inside
    the run, under a memory budget too (seen on a GPU node)."""
    from dltutor.core.engines import op_compatible
    if offload_mode(cfg) != "nvme" or op_compatible("async_io"):
        return None
    return ("NVMe offload needs DeepSpeed's async_io op, which cannot be built here: libaio's "
            "header and library were not found (DeepSpeed's check compiles a call to io_submit). "
            "Install libaio-dev (Debian, Ubuntu) or libaio-devel (RHEL, Rocky), or load a libaio "
            "module and point CFLAGS/LDFLAGS at it; or offload to the CPU instead "
            "(configs/zero3_offload_cpu.json)")


def oom_line(phase: str, exc: BaseException) -> str:
    """The phase, the allocator's first line and, under a budget, what the process held then."""
    from dltutor.zero.budget import usage_note
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"OUT OF MEMORY during {phase}: {type(exc).__name__}: {first[:300]}{usage_note()}"


def report_oom(phase: str, exc: BaseException) -> None:
    """Print the OUT OF MEMORY line (rank-prefixed) when `exc` is an allocator failure; the BERT
    labs call it in their `except` before re-raising, so the notebook can say where memory ran out."""
    from dltutor.core import dist
    from dltutor.zero.budget import is_out_of_memory
    if is_out_of_memory(exc):
        dist.rank_print(oom_line(phase, exc))


_DS_LOG = re.compile(r"(RunningAvgSamplesPerSec|CurrSamplesPerSec|MemAllocated|MaxMemAllocated"
                     r"|loss_scale|skipped|lr)=\s*\[?([-\d.e+]+)")
_STEP = re.compile(r"(?:global_step|(?<![_/\w])step)=(\d+)")
_OVERFLOW = re.compile(r"OVERFLOW!.*?(?:loss scale:\s*(\d+), reducing to\s*(\d+))?\s*$")


def parse_deepspeed_log(text: str) -> list[dict]:
    """DeepSpeed's own progress lines (`steps_per_print`) as rows of numbers, one per step.

    The `step=` line (lr, skipped) and the throughput line of the same step (`global_step=`,
    RunningAvgSamplesPerSec, CurrSamplesPerSec, MemAllocated, MaxMemAllocated in GB) become one
    row; an fp16 `OVERFLOW! ... reducing to N` line before them sets `overflow` and
    `loss_scale` (the new scale) on the step it skipped. When the step count starts again (a
    log with several runs, e.g. sweep_zero.py), `run` counts up from 0.
    """
    rows, run, last, overflow = [], 0, 0, None
    for line in text.splitlines():
        ov = _OVERFLOW.search(line)
        if ov:
            overflow = float(ov.group(2)) if ov.group(2) else float("nan")
            continue
        step = _STEP.search(line)
        found = dict(_DS_LOG.findall(line))
        if not (step and found):
            continue
        n = int(step.group(1))
        if n < last or (n == last and "global_step" not in line and rows
                        and "lr" in rows[-1]):
            run += 1                                   # the step count started again
        last = n
        if not rows or rows[-1]["step"] != n or rows[-1]["run"] != run:
            rows.append({"run": run, "step": n})
        rows[-1].update({k: float(v) for k, v in found.items()})
        if overflow is not None:
            rows[-1].update(overflow=True, loss_scale=overflow)
            overflow = None
    return rows


def release_engine(engine) -> None:
    """Free a finished engine so the next config in the same process starts clean.

    `engine.destroy()`, then take the engine's model off DeepSpeed's module stack: DeepSpeed 0.19's
    stage-3 parameter offload appends the top module to `parameter_offload.FWD_MODULE_STACK` when
    it is built and never pops it, so that module-level list keeps every stage-3 engine (model,
    partitions, optimizer) alive; a sweep of 50 engines grew by one model's states per stage-3 run."""
    if hasattr(engine, "destroy"):
        engine.destroy()
    try:
        from deepspeed.runtime.zero import parameter_offload
    except ImportError:
        return
    stack = parameter_offload.FWD_MODULE_STACK
    stack[:] = [m for m in stack if m is not engine.module]

