"""Notebook 01's fast path, timed to a target: seconds of training until the real Fashion-MNIST
test accuracy reaches 90 %, one knob at a time, side by side in one run.

    .venv/bin/python bench/bench_time_to_accuracy.py --ladder --json ladder.json   # every knob
    .venv/bin/python bench/bench_time_to_accuracy.py                  # one run: every knob but compile
    .venv/bin/python bench/bench_time_to_accuracy.py --device cpu --train-images 4096 --target 0.7
    python3 bench/bench_time_to_accuracy.py --width 64 --target 0.92  # any flag below

--ladder trains the same model (models.cifar_resnet(--width), same seed, same first weights) once
per rung, each rung adding one knob notebook 01 teaches to the rung before it (dltutor.single.
ladder.LADDER): a DataLoader with 2 workers in fp32 -> the data set resident on the device
(loaders.DeviceLoader, crop and flip there) -> channels_last -> AMP (bf16 on GPUs of compute
capability >= 8.0, fp16 with a GradScaler below; none on a CPU, which the rung says) -> a larger
batch with the learning rate scaled linearly and a short warm-up -> torch.compile -> its
mode='reduce-overhead' (CUDA graphs; the default mode on a CPU, which the rung says). Then the last rung again with --repeats further seeds.

The clock counts training steps only (synchronized before it is read). Before it starts, each rung
takes --warmup-steps steps (cuDNN's autotuning, torch.compile's compile: "warm-up s", reported
apart) and then restores the first weights, so every rung starts from the same state. Test
accuracy on all test images is measured every --eval-every-images training images, off the clock
("eval s"). A rung stops at the target, after its schedule, or after --cap-s seconds of training
("not reached"). The last line is `DLTUTOR_METRICS {json}`; --json writes the same dict.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # a checkout, not installed

import torch  # noqa: E402

from bench_result import emit  # noqa: E402

from dltutor.core.device import autocast, grad_scaler, hardware_label, synchronize, training_precision  # noqa: E402
from dltutor.core.env import data_dir, seed_everything  # noqa: E402
from dltutor.core.train_step import train_step  # noqa: E402
from dltutor.data import fashion_mnist as fashion_mnist_data  # noqa: E402
from dltutor.data import loaders  # noqa: E402
from dltutor.single import models, train  # noqa: E402
from dltutor.single.ladder import Rung, describe, ladder_on  # noqa: E402


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if visible)")
    ap.add_argument("--ladder", action="store_true", help="every rung of the ladder, side by side")
    ap.add_argument("--rungs", default=None, help="with --ladder: only these rungs, e.g. 1,2,6")
    ap.add_argument("--width", type=int, default=16, help="ResNet width (64 = ResNet-18)")
    ap.add_argument("--batch-size", type=int, default=128, help="the single run's batch")
    ap.add_argument("--lr", type=float, default=0.05, help="peak learning rate at batch 128")
    ap.add_argument("--target", type=float, default=0.90, help="test accuracy to reach")
    ap.add_argument("--max-epochs", type=int, default=5, help="cosine schedule length; the cap")
    ap.add_argument("--eval-every-images", type=int, default=15_000,
                    help="training images between test evaluations")
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed steps before each rung")
    ap.add_argument("--cap-s", type=float, default=120.0, help="seconds of training per rung at most")
    ap.add_argument("--repeats", type=int, default=2, help="--ladder: the last rung again, new seeds")
    ap.add_argument("--train-images", type=int, default=None, help="a subset (default: all 60,000)")
    ap.add_argument("--test-images", type=int, default=None, help="a subset (default: all 10,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    return ap.parse_args(argv)


def fashion_mnist(train_images=None, test_images=None):
    """The real Fashion-MNIST (CIFAR-10's shape), all of it or a first-N subset; a clear error when
    it is not there."""
    pair = fashion_mnist_data.load(data_dir())
    if pair is None:
        raise SystemExit("bench_time_to_accuracy: the real Fashion-MNIST is not installed: run "
                         "`make setup`, or set DLTUTOR_FASHION_MNIST=<folder of its 4 idx files>")
    train_ds, test_ds = pair
    sub = torch.utils.data.Subset
    if train_images:
        train_ds = sub(train_ds, range(min(train_images, len(train_ds))))
    if test_images:
        test_ds = sub(test_ds, range(min(test_images, len(test_ds))))
    return train_ds, test_ds


class Data:
    """The data set once per process: as datasets (DataLoader rungs) and resident on the device."""

    def __init__(self, train_ds, test_ds, dev):
        self.train_ds, self.test_ds, self.dev = train_ds, test_ds, dev
        self.train = loaders.to_device_tensors(train_ds, dev)
        self.test = loaders.to_device_tensors(test_ds, dev)

    def loaders(self, rung: Rung):
        if rung.device_data:
            src = loaders.source_of(self.train_ds)
            return (loaders.DeviceLoader(*self.train, rung.batch, True, True, source=src),
                    loaders.DeviceLoader(*self.test, 512, False, False, drop_last=False, source=src))
        return loaders.make_loaders(self.train_ds, self.test_ds, rung.batch, workers=rung.workers,
                                    test_batch_size=512)


def _steps(model, opt, sched, batches, rung, dev, scaler):
    for x, y in batches:
        x, y = train.to_device(x, dev, rung.channels_last), y.to(dev, non_blocking=True)
        train_step(model, opt, x, y, autocast=lambda: autocast(dev, rung.amp), scaler=scaler)
        if sched is not None:
            sched.step()
        yield


def epochs(loader):
    """The loader's batches, epoch after epoch (an evaluation pauses it, never restarts it)."""
    while True:
        yield from loader


def _warm_up(step_model, rung, tr, dev, n):
    """`n` untimed steps (compile, cuDNN autotuning) on a throw-away optimizer; their seconds."""
    synchronize(dev)
    t0 = time.perf_counter()
    opt, _ = train.make_optimizer(step_model, rung.lr)
    for i, _ in enumerate(_steps(step_model, opt, None, tr, rung, dev, grad_scaler(dev, rung.amp))):
        if i + 1 >= n:
            break
    synchronize(dev)
    return time.perf_counter() - t0


def timed_run(model, step_model, rung, tr, te, dev, args) -> dict:
    """Train from `model`'s current weights until the target; the clock counts training steps."""
    per_epoch = len(tr)
    total = rung.epochs * per_epoch
    opt, sched = train.make_optimizer(step_model, rung.lr, total_steps=total,
                                      warmup_steps=round(rung.warmup_epochs * per_epoch))
    scaler = grad_scaler(dev, rung.amp)
    every = max(1, round(args.eval_every_images / rung.batch))
    trained, evals, curve, step, reached = 0.0, 0.0, [], 0, None
    steps = _steps(step_model, opt, sched, epochs(tr), rung, dev, scaler)   # resumed after evals
    while step < total and reached is None and trained < args.cap_s:
        model.train()
        synchronize(dev)
        t0 = time.perf_counter()
        for _ in steps:
            step += 1
            if step % every == 0 or step == total:
                break
        synchronize(dev)
        trained += time.perf_counter() - t0
        t1 = time.perf_counter()
        acc = train.evaluate(model, te, dev, channels_last=rung.channels_last, amp=rung.amp)["acc"]
        evals += time.perf_counter() - t1
        curve.append(dict(step=step, epoch=round(step / per_epoch, 3), train_s=round(trained, 3),
                          test_acc=round(acc, 4)))
        print(f"  step {step:5d} (epoch {step / per_epoch:.2f}): test accuracy {acc:.4f} after "
              f"{trained:.2f} s of training", flush=True)
        if acc >= args.target:
            reached = curve[-1]
    return dict(reached=reached is not None, seconds_to_target=reached["train_s"] if reached else None,
                steps_to_target=reached["step"] if reached else None,
                epochs_to_target=reached["epoch"] if reached else None,
                img_per_s=round(step * rung.batch / trained, 1) if trained else None,
                eval_seconds=round(evals, 2), final_acc=curve[-1]["test_acc"], curve=curve)


def run_rung(rung: Rung, data: Data, dev, args, seeds=(0,)) -> list[dict]:
    """One result per seed: the first compiles/warms up, each starts from that seed's weights."""
    seed_everything(seeds[0])
    model = models.cifar_resnet(width=args.width).to(dev)
    if rung.channels_last:
        model = model.to(memory_format=torch.channels_last)
    first = copy.deepcopy(model.state_dict())
    step_model = (torch.compile(model, mode=None if rung.compile_mode == "default" else
                                rung.compile_mode) if rung.compile else model)
    tr, te = data.loaders(rung)
    warm_s = _warm_up(step_model, rung, tr, dev, args.warmup_steps)
    out = []
    for i, seed in enumerate(seeds):
        if i == 0:
            model.load_state_dict(first)
        else:
            seed_everything(seed)
            model.load_state_dict(models.cifar_resnet(width=args.width).state_dict())
        seed_everything(seed)                       # the same batch order as every other rung
        print(f"rung {rung.name} (seed {seed}): {describe(rung)}", flush=True)
        start = round(float(sum(p.detach().double().abs().sum() for p in model.parameters())), 6)
        res = timed_run(model, step_model, rung, tr, te, dev, args)
        out.append(dict(rung=rung.name, knob=rung.knob, seed=seed, batch_size=rung.batch,
                        lr=rung.lr, warmup_epochs=rung.warmup_epochs, schedule_epochs=rung.epochs,
                        device_data=rung.device_data, channels_last=rung.channels_last,
                        precision=training_precision(dev) if rung.amp else "fp32",
                        compiled=rung.compile, warmup_seconds=round(warm_s, 2) if i == 0 else 0.0,
                        first_weights_abs_sum=start,
                        **res))
    return out


def run(args) -> dict:
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        dev = torch.device("cuda", 0 if dev.index is None else dev.index)   # set_device wants one
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
    data = Data(*fashion_mnist(args.train_images, args.test_images), dev)
    amp = dev.type == "cuda"
    if args.ladder:
        ladder = ladder_on(dev)
        picked = [int(i) for i in args.rungs.split(",")] if args.rungs else range(1, len(ladder) + 1)
        rungs = [ladder[i - 1] for i in picked]
    else:
        rungs = [Rung("single", "the flags given", True, True, amp, args.batch_size, args.lr,
                      0.0, args.max_epochs, False)]
    results = []
    for k, rung in enumerate(rungs):
        last = k == len(rungs) - 1 and args.ladder
        seeds = tuple(args.seed + i for i in range(1 + (args.repeats if last else 0)))
        results += run_rung(rung, data, dev, args, seeds)
        if args.json and not last:                  # a run stopped later keeps the rungs so far
            args.json.write_text(json.dumps({**summary(args, dev, data, results), "partial": True}))
    return summary(args, dev, data, results)


def summary(args, dev, data, results) -> dict:
    return dict(bench="time_to_accuracy_ladder" if args.ladder else "time_to_accuracy",
                data=fashion_mnist_data.FASHION, hardware=hardware_label(dev),
                device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU",
                torch=torch.__version__, threads=torch.get_num_threads(), width=args.width,
                target=args.target, train_images=len(data.train[0]), test_images=len(data.test[0]),
                eval_every_images=args.eval_every_images, cap_s=args.cap_s, runs=results)


def main(argv=None) -> int:
    args = parse(argv)
    out = run(args)
    for r in out["runs"]:
        if r["reached"]:
            print(f"{r['rung']} (seed {r['seed']}): {out['target']:.0%} test accuracy after "
                  f"{r['seconds_to_target']} s of training ({r['steps_to_target']} steps, warm-up "
                  f"{r['warmup_seconds']} s apart) on {out['device']}, {r['precision']}")
        else:
            print(f"{r['rung']} (seed {r['seed']}): {out['target']:.0%} NOT reached (last "
                  f"{r['final_acc']:.4f}) on {out['device']}")
    emit(out, args.json, skip=("runs",))
    return 0 if all(r["reached"] for r in out["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
