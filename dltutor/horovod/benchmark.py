"""The synthetic image-classification benchmark shared by the Horovod lab and its DDP twin.

Both `course/labs/03_horovod/pytorch_synthetic_benchmark.py` (Horovod) and
`ddp_synthetic_benchmark.py` (PyTorch DDP) take the same flags (`add_arguments`), build the same
model and the same random batch (`build_model`, `synthetic_batch`), time the same way
(`time_iterations`) and print the same lines (`header_lines`, `summary_lines`), so the only
difference between the two runs is the engine that averages the gradients.

The printed lines follow the classic Horovod synthetic benchmark, e.g. the seed's 2-GPU run
(seed 001, dltutor.core.sources; the seed's text extraction writes some "+-" as "+ -"):

    Model: resnet50
    Batch size: 64
    Number of GPUs: 2
    Running warmup...
    Running benchmark...
    Iter #0: 326.8 img/sec per GPU
    ...
    Img/sec per GPU: 325.2 +-1.8
    Total img/sec on 2 GPU(s): 650.3 +-3.6

where "+-" is 1.96 standard deviations of the per-iteration rates, as the classic benchmark prints
it: the range ~95 % of single iterations fall in, not the uncertainty of the mean. The course
compares runs with the 95 % CI of the mean instead (`dltutor.horovod.runs.iteration_ci`).
`parse_output(text)` reads these lines back (tests, notebooks).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import time

from dltutor.core import flags
from dltutor.core.device import device_word, synchronize
from dltutor.core.train_step import train_step
from dltutor.core.units import MiB

TINY = dict(model="resnet18", batch_size=4, image_size=32, num_warmup_batches=1,
            num_batches_per_iter=1, num_iters=3)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The benchmark's flags (the classic ones plus --image-size, --num-classes, --tiny)."""
    a = parser.add_argument
    a("--model", default="resnet50", help="any torchvision.models name (random weights)")
    a("--batch-size", type=flags.positive_int, default=64, help="images per worker per step")
    a("--image-size", type=flags.positive_int, default=224, help="square input size; 32 or 64 on CPUs")
    a("--num-classes", type=flags.positive_int, default=1000, help="output classes of the model")
    a("--num-warmup-batches", type=flags.nonnegative_int, default=10, help="untimed steps before the benchmark")
    a("--num-batches-per-iter", type=flags.positive_int, default=10, help="steps per timed iteration")
    a("--num-iters", type=flags.positive_int, default=10, help="timed iterations")
    a("--fp16-allreduce", action="store_true", help="send gradients as float16")
    a("--use-adasum", action="store_true", help="Adasum instead of averaging (Horovod only)")
    a("--no-cuda", action="store_true", help="run on the CPU even when a GPU is visible")
    a("--threads", type=flags.nonnegative_int, default=0,
      help="CPU threads per worker; 0 = share this node's cores evenly between its workers")
    a("--seed", type=int, default=42, help="seed of the model weights (data: seed + rank)")
    flags.add_tiny(parser, TINY)
    return parser


def parse_args(description: str, argv=None) -> argparse.Namespace:
    """The lab's arguments; `description` (the lab's docstring) is printed by --help as is."""
    parser = flags.parser(description)
    add_arguments(parser)
    return flags.parse(parser, argv)


def threads_for(args, local_workers: int) -> int:
    """Threads per worker: --threads, else this node's cores split evenly among its workers."""
    from dltutor.core.env import threads_per_rank
    return args.threads if args.threads > 0 else threads_per_rank(local_workers)


# Horovod on CPU workers: each worker owns one core, so Horovod's background thread has no core of
# its own. With Horovod's default 1 ms cycle it wakes (and negotiates with every other worker)
# 1000 times a second, taking time from the compute; bench/bench_horovod_vs_ddp.py measures
# Horovod's defaults and these side by side. GPUs keep Horovod's defaults (their compute is not on
# the cores). A value already in the environment always wins.
HOROVOD_DEFAULTS = {"HOROVOD_CYCLE_TIME": "1", "HOROVOD_FUSION_THRESHOLD": str(128 * MiB)}
HOROVOD_CPU_SETTINGS = {"HOROVOD_CYCLE_TIME": "50", "HOROVOD_FUSION_THRESHOLD": str(32 * MiB)}


def horovod_cpu_settings(on_cpu: bool, environ=None) -> dict:
    """Before hvd.init(): on CPU workers, set HOROVOD_CPU_SETTINGS where the environment is silent.

    Returns the cycle time (ms) and fusion threshold (bytes) Horovod will use, and where each came
    from ('environment', 'course CPU setting' or 'Horovod default'), for the lab to print.
    """
    environ = os.environ if environ is None else environ
    used = {}
    for key, default in HOROVOD_DEFAULTS.items():
        if key in environ:
            source = "environment"
        elif on_cpu:
            environ[key], source = HOROVOD_CPU_SETTINGS[key], "course CPU setting"
        else:
            source = "Horovod default"
        used[key] = (float(environ.get(key, default)), source)
    return {"cycle_time_ms": used["HOROVOD_CYCLE_TIME"][0],
            "fusion_threshold_bytes": int(used["HOROVOD_FUSION_THRESHOLD"][0]),
            "sources": {k: v[1] for k, v in used.items()}}


def horovod_settings_line(s: dict) -> str:
    src = s["sources"]
    return (f"Horovod: HOROVOD_CYCLE_TIME={s['cycle_time_ms']:g} ms ({src['HOROVOD_CYCLE_TIME']}), "
            f"HOROVOD_FUSION_THRESHOLD={s['fusion_threshold_bytes'] / MiB:g} MiB "
            f"({src['HOROVOD_FUSION_THRESHOLD']})")


def build_model(name: str, num_classes: int = 1000, seed: int = 42):
    """A torchvision model by name, random weights drawn from `seed` (identical on every rank)."""
    import torch
    import torchvision.models as tvm
    try:
        builder = getattr(tvm, name)
    except AttributeError:
        raise SystemExit(f"--model {name!r}: not a torchvision.models builder "
                         "(e.g. resnet50, resnet18, mobilenet_v3_small)") from None
    torch.manual_seed(seed)
    torch.backends.cudnn.benchmark = True  # fixed-size images: cuDNN picks its fastest kernels (GPU)
    return builder(weights=None, num_classes=num_classes)


def synthetic_batch(batch_size: int, image_size: int, num_classes: int, seed: int, device):
    """One random batch that stays in memory for the whole run: no files, no decoding."""
    from dltutor.data.synthetic import synthetic_images
    return synthetic_images(batch_size, (3, image_size, image_size), num_classes,
                            device=device, seed=seed)


def time_iterations(step, num_iters: int, num_batches_per_iter: int, batch_size: int,
                    device=None, on_iter=None) -> tuple[list[float], list[float]]:
    """Run `num_iters` timed iterations of `num_batches_per_iter` calls of `step()`.

    Returns (img/s of each iteration, seconds per step of each iteration). `on_iter(k, rate)`
    is called after each iteration (the labs print the "Iter #k" line there).
    """
    rates, step_times = [], []
    for k in range(num_iters):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(num_batches_per_iter):
            step()
        synchronize(device)
        elapsed = time.perf_counter() - start
        rates.append(batch_size * num_batches_per_iter / elapsed)
        step_times.append(elapsed / num_batches_per_iter)
        if on_iter is not None:
            on_iter(k, rates[-1])
    return rates, step_times


def summarize_imgs_per_sec(rates, world_size: int = 1) -> dict:
    """Mean img/s per worker with a 1.96-sigma interval, and the total over `world_size` workers.

    As in the classic benchmark, the total is world_size x this worker's mean (every worker does
    the same work); sigma is the population standard deviation of the per-iteration rates.
    """
    rates = [float(r) for r in rates]
    if not rates:
        raise ValueError("no iterations were timed (--num-iters must be >= 1)")
    mean = sum(rates) / len(rates)
    conf = 1.96 * math.sqrt(sum((r - mean) ** 2 for r in rates) / len(rates))
    return {"img_sec_per_worker": mean, "img_sec_conf": conf,
            "total_img_sec": world_size * mean, "total_img_sec_conf": world_size * conf,
            "world_size": world_size}


def header_lines(model: str, batch_size: int, world_size: int, device) -> list[str]:
    return [f"Model: {model}", f"Batch size: {batch_size}",
            f"Number of {device_word(device)}s: {world_size}"]


def iter_line(k: int, rate: float, device) -> str:
    return f"Iter #{k}: {rate:.1f} img/sec per {device_word(device)}"


def summary_lines(summary: dict, device) -> list[str]:
    word = device_word(device)
    return [f"Img/sec per {word}: {summary['img_sec_per_worker']:.1f} "
            f"+-{summary['img_sec_conf']:.1f}",
            f"Total img/sec on {summary['world_size']} {word}(s): "
            f"{summary['total_img_sec']:.1f} +-{summary['total_img_sec_conf']:.1f}"]


def run(args, model, optimizer, data, target, device, rank: int, world_size: int,
        engine: str, extra: dict | None = None) -> dict:
    """Warm up, time, print the classic lines on rank 0, report metrics on every rank."""
    import torch
    from dltutor.core import dist

    def log(line):
        if rank == 0:
            print(line, flush=True)

    for line in header_lines(args.model, args.batch_size, world_size, device):
        log(line)
    log(f"Image size: {args.image_size}x{args.image_size}, threads per worker: "
        f"{torch.get_num_threads()}, engine: {engine}, data: synthetic")

    losses = []   # this rank's loss at every step, warm-up included (tensors: no sync per step)

    def step():
        losses.append(train_step(model, optimizer, data, target)[0].detach())

    log("Running warmup...")
    for _ in range(args.num_warmup_batches):
        step()
    log("Running benchmark...")
    rates, step_times = time_iterations(step, args.num_iters, args.num_batches_per_iter,
                                        args.batch_size, device,
                                        on_iter=lambda k, r: log(iter_line(k, r, device)))
    summary = summarize_imgs_per_sec(rates, world_size)
    for line in summary_lines(summary, device):
        log(line)
    if extra and extra.get("shape"):   # where the workers ran: the label the total carries
        log(f"Total img/sec on {extra['shape']}: {summary['total_img_sec']:.1f}")
    return dist.report(engine=engine, model=args.model, batch_size=args.batch_size,
                       image_size=args.image_size, device=device_word(device),
                       threads=torch.get_num_threads(), fp16_allreduce=args.fp16_allreduce,
                       img_sec=rates, step_time_s=sum(step_times) / len(step_times),
                       losses=[float(loss) for loss in losses],
                       **summary, **(extra or {}))


# ---------------------------------------------------------------- reading the output back
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_PATTERNS = {
    "model": re.compile(r"^Model: (\S+)$", re.M),
    "batch_size": re.compile(r"^Batch size: (\d+)$", re.M),
    "workers": re.compile(r"^Number of (CPU|GPU)s: (\d+)$", re.M),
    "iters": re.compile(rf"^Iter #(\d+): {_NUM} img/sec per (CPU|GPU)$", re.M),
    "per_worker": re.compile(rf"^Img/sec per (CPU|GPU): {_NUM} \+-{_NUM}$", re.M),
    "total": re.compile(rf"^Total img/sec on (\d+) (CPU|GPU)\(s\): {_NUM} \+-{_NUM}$", re.M),
}


def parse_output(text: str) -> dict:
    """The benchmark's printed lines as numbers; raises ValueError naming a missing line.

    Accepts lines with a launcher prefix such as `[rank 0] ` or `[0]<stdout>:` in front.
    """
    clean = "\n".join(re.sub(r"^(\[[^\]]*\](<std(out|err)>)?:?\s?)+", "", line)
                      for line in text.splitlines())
    found = {k: p.findall(clean) for k, p in _PATTERNS.items()}
    for key in ("model", "batch_size", "workers", "iters", "per_worker", "total"):
        if not found[key]:
            raise ValueError(f"benchmark output has no {key!r} line ({_PATTERNS[key].pattern})")
    if "Running warmup..." not in clean or "Running benchmark..." not in clean:
        raise ValueError("benchmark output lacks 'Running warmup...' / 'Running benchmark...'")
    word, workers = found["workers"][0]
    _, mean, conf = found["per_worker"][-1]
    n, _, total, total_conf = found["total"][-1]
    return {"model": found["model"][0], "batch_size": int(found["batch_size"][0]),
            "device": word, "workers": int(workers),
            "iters": [float(r) for _, r, _ in found["iters"]],
            "img_sec_per_worker": float(mean), "img_sec_conf": float(conf),
            "total_workers": int(n), "total_img_sec": float(total),
            "total_img_sec_conf": float(total_conf)}
