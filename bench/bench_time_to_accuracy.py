"""Notebook 01's fast path, timed to a target: seconds of training until the real Fashion-MNIST
test accuracy reaches 90 %, on the device this process sees.

    .venv/bin/python bench/bench_time_to_accuracy.py                  # a GPU if visible, else CPU
    .venv/bin/python bench/bench_time_to_accuracy.py --device cpu --json out.json
    python3 bench/bench_time_to_accuracy.py --width 64 --target 0.92  # any flag below

The fast path is notebook 01's section 4: the whole data set resident on the device
(loaders.DeviceLoader, random crop and flip done there), channels_last, and AMP where the device
has it (bf16 on GPUs of compute capability >= 8.0, fp16 with a GradScaler below; none on a CPU).
The model (models.cifar_resnet(width)), batch, learning-rate schedule (cosine over --max-epochs)
and seed are the same on every device. Test accuracy on all 10,000 test images is measured every
--eval-every steps; the clock counts training steps only (synchronized before it is read), the
evaluations are reported apart. The run stops at the target, or after --max-epochs and says
"not reached". The last line is `DLTUTOR_METRICS {json}`; --json writes the same dict.
"""
from __future__ import annotations

import argparse
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


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if visible)")
    ap.add_argument("--width", type=int, default=16, help="ResNet width (64 = ResNet-18)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--target", type=float, default=0.90, help="test accuracy to reach")
    ap.add_argument("--max-epochs", type=int, default=5, help="cosine schedule length; the cap")
    ap.add_argument("--eval-every", type=int, default=117, help="steps between test evaluations")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    return ap.parse_args(argv)


def fashion_mnist():
    """The real Fashion-MNIST, all of it (CIFAR-10's shape); a clear error when it is not there."""
    pair = fashion_mnist_data.load(data_dir())
    if pair is None:
        raise SystemExit("bench_time_to_accuracy: the real Fashion-MNIST is not installed: run "
                         "`make setup`, or set DLTUTOR_FASHION_MNIST=<folder of its 4 idx files>")
    return pair


def run(args) -> dict:
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda":
        dev = torch.device("cuda", 0 if dev.index is None else dev.index)   # set_device wants one
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
    seed_everything(args.seed)
    train_ds, test_ds = fashion_mnist()
    tr, te = loaders.device_loaders(train_ds, test_ds, args.batch_size, device=dev, augment=True)
    model = models.cifar_resnet(width=args.width).to(dev).to(memory_format=torch.channels_last)
    amp = dev.type == "cuda"
    total = args.max_epochs * len(tr)
    opt, sched = train.make_optimizer(model, args.lr, total_steps=total)
    scaler = grad_scaler(dev, amp)
    trained, evals, curve, step, reached = 0.0, 0.0, [], 0, None
    while step < total and reached is None:
        model.train()
        synchronize(dev)
        t0 = time.perf_counter()
        for x, y in tr:
            x = x.contiguous(memory_format=torch.channels_last)
            train_step(model, opt, x, y, autocast=lambda: autocast(dev, amp), scaler=scaler)
            sched.step()
            step += 1
            if step % args.eval_every == 0 or step == total:
                break
        synchronize(dev)
        trained += time.perf_counter() - t0
        t1 = time.perf_counter()
        acc = train.evaluate(model, te, dev, channels_last=True, amp=amp)["acc"]
        evals += time.perf_counter() - t1
        curve.append(dict(step=step, epoch=round(step / len(tr), 3), train_s=round(trained, 2),
                          test_acc=round(acc, 4)))
        print(f"step {step:5d} (epoch {step / len(tr):.2f}): test accuracy {acc:.4f} after "
              f"{trained:.1f} s of training", flush=True)
        if acc >= args.target:
            reached = curve[-1]
    precision = training_precision(dev) if amp else "fp32"
    out = dict(bench="time_to_accuracy", data=fashion_mnist_data.FASHION, hardware=hardware_label(dev),
               device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU",
               threads=torch.get_num_threads(), width=args.width, batch_size=args.batch_size,
               precision=precision, channels_last=True, data_on_device=True, target=args.target,
               reached=reached is not None, seconds_to_target=reached["train_s"] if reached else None,
               steps_to_target=reached["step"] if reached else None, eval_seconds=round(evals, 2),
               final_acc=curve[-1]["test_acc"], curve=curve)
    return out


def main(argv=None) -> int:
    args = parse(argv)
    out = run(args)
    if out["reached"]:
        print(f"{out['data']}: {out['target']:.0%} test accuracy after {out['seconds_to_target']} s "
              f"of training ({out['steps_to_target']} steps) on {out['device']}, {out['precision']}")
    else:
        print(f"{out['data']}: {out['target']:.0%} NOT reached in {args.max_epochs} epochs "
              f"(last {out['final_acc']:.4f}) on {out['device']}")
    emit(out, args.json, skip=("curve",))
    return 0 if out["reached"] else 1


if __name__ == "__main__":
    sys.exit(main())
