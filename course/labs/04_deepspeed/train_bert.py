"""Train the BERT-style masked-LM with plain PyTorch and torch.optim.Adam (no ZeRO).

Precision: fp32 on a CPU; on a GPU mixed precision by default (fp32 weights and Adam, autocast to
bf16 on compute capability >= 8.0, else fp16 with a GradScaler), the layout the seed's formula
counts (`--dtype` to choose). `--checkpoint_dir` saves model, Adam and the loss scaler.

The seed's first run: every rank holds the whole model, its gradients and Adam's two moments, so
a big model dies in Adam's first step (`state['exp_avg_sq'] = torch.zeros_like(p)`).

Launch forms (run in this lab's folder; each rank prints one `DLTUTOR_METRICS {json}` line):
  python train_bert.py --tiny                              # one process: the seed's plain run
  python train_bert.py --num_layers 192 --h_dim 1024 --ff_dim 4096 --batch_size 1  # 2.5B [full size]
  python train_bert.py --tiny --mem-budget-mb 300          # OS-enforced memory budget
  torchrun --nproc-per-node 2 train_bert.py --tiny          # DDP: still a full copy per rank
  srun -n 2 python train_bert.py --tiny                     # Slurm
`deepspeed --num_gpus N` is for train_bert_ds.py, the same model with ZeRO.
"""
import sys
import time

from dltutor.core import dist, env
from dltutor.core.device import synchronize
from dltutor.core.train_step import train_step
from dltutor.zero import bert_lab, budget, memory
from dltutor.zero.bert import build_bert


def main(argv=None):
    args = bert_lab.parse(bert_lab.parser(__doc__), argv)
    import torch

    ctx = dist.init()                                    # DDP: process group if launched so
    budget_bytes = budget.apply_budget(args.mem_budget_mb, dev=ctx.device)  # GPU: a device cap
    amp, scaler = bert_lab.mixed_precision(args, ctx.device)  # fp32 masters, autocast, scaler
    at_start = budget.reset_peak(ctx.device)             # GPU: the peak counts from here
    dtype = bert_lab.torch_dtype(args.dtype)
    env.seed_everything(args.seed, 0)                   # same initial weights on every rank
    phase = "model construction"
    try:
        model = build_bert(**bert_lab.model_flags(args)).to(ctx.device)  # fp32 master weights
        n_params = sum(p.numel() for p in model.parameters())
        net = model
        if ctx.is_distributed:
            net = torch.nn.parallel.DistributedDataParallel(  # DDP: all-reduce grads
                model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        meter = memory.ModelStateMeter(model, opt)
        losses, t0, timed = [], None, 0
        for step in range(args.num_iterations):
            phase = f"iteration {step} (forward/backward)"
            if step == 1:
                synchronize(ctx.device)                  # step 0's GPU work is done
                t0 = time.perf_counter()
            tokens, labels = bert_lab.rank_batch(args, ctx, step, ctx.device)
            if step == args.measure_iter:
                meter.arm()

            def before_adam():
                nonlocal phase
                meter.disarm()
                meter.sample()
                phase = f"iteration {step} (Adam step)"   # step 0 allocates exp_avg, exp_avg_sq

            loss, _ = train_step(net, opt, tokens, labels, loss_fn=None, autocast=amp,
                                 scaler=scaler, before_step=before_adam)
            losses.append(float(loss.detach()))
            timed += step > 0
        synchronize(ctx.device)
        elapsed = time.perf_counter() - t0 if t0 else float("nan")
    except (RuntimeError, MemoryError) as exc:
        bert_lab.report_oom(phase, exc)
        raise
    est = memory.estimate_zero_memory(n_params, k_l=torch.finfo(dtype).bits // 8, k_h=4,
                                      d=ctx.world_size, z=0)
    dist.report(lab="train_bert", stage=0, offload="none", dtype=args.dtype, params=n_params,
                start_step=0, losses=losses,
                samples_per_s=timed * args.batch_size * ctx.world_size / elapsed if timed
                else None, model_state_bytes=meter.peak, predicted=est.as_dict(),
                budget_bytes=budget_bytes, loss_scale=scaler.get_scale() if scaler.is_enabled()
                else None, allocated_at_start=at_start, **memory.peak_memory_bytes(ctx.device))
    if args.checkpoint_dir and ctx.is_main:
        save_checkpoint(args.checkpoint_dir, model, opt, scaler, args.num_iterations)
    dist.teardown()


def save_checkpoint(folder, model, opt, scaler, step: int):
    """Model, Adam and the loss scaler (its scale and growth tracker) in <folder>/plain.pt."""
    import os

    import torch
    os.makedirs(folder, exist_ok=True)
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "scaler": scaler.state_dict()}, os.path.join(folder, "plain.pt"))


if __name__ == "__main__":
    sys.exit(main())
