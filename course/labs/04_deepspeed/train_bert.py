"""Train the BERT-style masked-LM with plain PyTorch and torch.optim.Adam (no ZeRO).

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
from dltutor.core.train_step import train_step
from dltutor.zero import bert_lab, budget, memory
from dltutor.zero.bert import build_bert


def main(argv=None):
    args = bert_lab.parse(bert_lab.parser(__doc__), argv)
    import torch

    ctx = dist.init()                                    # DDP: process group if launched so
    budget_bytes = budget.apply_budget(args.mem_budget_mb)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[
        bert_lab.resolve_dtype(args)]
    env.seed_everything(args.seed, 0)                   # same initial weights on every rank
    phase = "model construction"
    try:
        model = build_bert(**bert_lab.model_flags(args)).to(ctx.device, dtype)
        n_params = sum(p.numel() for p in model.parameters())
        net = model
        if ctx.is_distributed:
            net = torch.nn.parallel.DistributedDataParallel(model)  # DDP: all-reduce grads
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        meter = memory.ModelStateMeter(model, opt)
        losses, t0, timed = [], None, 0
        for step in range(args.num_iterations):
            phase = f"iteration {step} (forward/backward)"
            if step == 1:
                t0 = time.perf_counter()
            tokens, labels = bert_lab.rank_batch(args, ctx, step, ctx.device)
            if step == args.measure_iter:
                meter.arm()

            def before_adam():
                nonlocal phase
                meter.disarm()
                meter.sample()
                phase = f"iteration {step} (Adam step)"   # step 0 allocates exp_avg, exp_avg_sq

            loss, _ = train_step(net, opt, tokens, labels, loss_fn=None, before_step=before_adam)
            losses.append(float(loss))
            timed += step > 0
        elapsed = time.perf_counter() - t0 if t0 else float("nan")
    except (RuntimeError, MemoryError) as exc:
        if budget.is_out_of_memory(exc):
            dist.rank_print(bert_lab.oom_line(phase, exc))
        raise
    est = memory.estimate_zero_memory(n_params, k_l=torch.finfo(dtype).bits // 8, k_h=4,
                                      d=ctx.world_size, z=0)
    dist.report(lab="train_bert", stage=0, offload="none", dtype=args.dtype, params=n_params,
                start_step=0, losses=losses,
                samples_per_s=timed * args.batch_size * ctx.world_size / elapsed if timed
                else None, model_state_bytes=meter.peak, predicted=est.as_dict(),
                budget_bytes=budget_bytes, **memory.peak_memory_bytes(ctx.device))
    dist.teardown()


if __name__ == "__main__":
    sys.exit(main())
