"""Lab 01: train a ResNet on CIFAR-10 on ONE device (one GPU, or the CPU), with checkpoint/resume.

This is the single-device baseline the later labs distribute. Everything it does lives in dltutor
(data, models, train), the same code notebook 01 runs.

Launch forms (run in this lab's folder; one process, one task; after `#`: what it does):
    python train.py                                      # GPU if visible, else CPU
    python train.py --tiny                               # seconds on a laptop CPU (CI)
    python train.py --checkpoint-dir ckpt --resume       # continue a run
    srun --ntasks=1 --gpus-per-task=1 python train.py --epochs 30        # one GPU of a Slurm job
    sbatch --ntasks=1 --gpus-per-task=1 --time=00:30:00 \\
        --wrap "python train.py --epochs 30 --checkpoint-dir ckpt --resume"   # a batch job

Data: $DLTUTOR_DATA/cifar-10-batches-py (stage it with `python -m dltutor data stage --from DIR`).
Without it (and offline, DLTUTOR_OFFLINE=1) the run trains on the real Fashion-MNIST (Debian's
dataset-fashion-mnist, shown as 3x32x32) and every line says "Fashion-MNIST (stand-in for CIFAR-10)";
without that too (or with DLTUTOR_FASHION_MNIST=none) on a SYNTHETIC stand-in, and says so.
The last line is `DLTUTOR_METRICS {json}` for dltutor.launch.run and the tests.
"""
from __future__ import annotations

import time

from dltutor.core import dist, env, flags
from dltutor.core.device import device as pick_device
from dltutor.core.device import hardware_label
from dltutor.data import cifar10, loaders
from dltutor.single import models, train

TINY = {"epochs": 2, "batch_size": 64, "width": 8, "subset": 256, "workers": 0}


def parse_args(argv=None):
    p = flags.parser(__doc__)
    p.add_argument("--epochs", type=flags.positive_int, default=30, help="passes over the training set")
    p.add_argument("--batch-size", type=flags.positive_int, default=128, help="images per optimizer step")
    p.add_argument("--lr", type=flags.positive_float, default=0.05, help="peak learning rate (cosine decay to 0)")
    p.add_argument("--workers", type=flags.nonnegative_int, default=2, help="DataLoader worker processes")
    p.add_argument("--width", type=flags.positive_int, default=64, help="ResNet width (64 = ResNet-18, 11.2 M params)")
    p.add_argument("--subset", type=flags.positive_int, default=None, help="use only this many training images")
    p.add_argument("--checkpoint-dir", default=None, help="save last.pt here after every epoch")
    p.add_argument("--resume", action="store_true", help="continue from <checkpoint-dir>/last.pt")
    p.add_argument("--seed", type=int, default=0, help="seed for python, numpy and torch")
    flags.add_tiny(p, TINY)
    args = flags.parse(p, argv)
    if args.resume and not args.checkpoint_dir:
        p.error("--resume needs --checkpoint-dir")
    return args


def main(argv=None):
    args = parse_args(argv)
    env.seed_everything(args.seed)
    device = pick_device()
    test_subset = args.subset // 2 if args.subset else None
    train_ds, test_ds, info = cifar10.load_cifar10(train_subset=args.subset, test_subset=test_subset, seed=args.seed)
    tag = f"[{cifar10.data_label(info)}, {hardware_label(device)}{', tiny' if args.tiny else ''}]"
    train_loader, test_loader = loaders.make_loaders(train_ds, test_ds, args.batch_size, args.workers)
    model = models.cifar_resnet(width=args.width)
    n_params = models.count_parameters(model)
    print(f"{tag} {info['train_size']} train / {info['test_size']} test images, "
          f"ResNet width {args.width}: {n_params:,} parameters, device {device}", flush=True)
    optimizer, scheduler = train.make_optimizer(model, args.lr, args.epochs * len(train_loader))
    t0 = time.perf_counter()
    history = train.fit(model, train_loader, test_loader, args.epochs, optimizer, scheduler, device,
                        checkpoint_dir=args.checkpoint_dir, resume=args.resume, progress=False)
    last = history.last()
    print(f"{tag} done in {time.perf_counter() - t0:.1f} s: test accuracy {last['test_acc']:.3f}", flush=True)
    dist.report(data=info["source"], hardware=hardware_label(device), device=str(device), tiny=args.tiny,
                epochs=len(history), params=n_params, train_loss=last["train_loss"],
                test_acc=last["test_acc"], img_per_s=last["img_per_s"], step_loss=history.step_loss)
    return history


if __name__ == "__main__":
    main()
