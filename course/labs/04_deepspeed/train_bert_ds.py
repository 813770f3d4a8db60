"""Train the BERT-style masked-LM with DeepSpeed ZeRO (stage 0-3, CPU or NVMe offload).

Launch forms (run in this lab's folder; each rank prints one `DLTUTOR_METRICS {json}` line):
  python train_bert_ds.py --tiny --deepspeed_config configs/zero0.json          # one process
  deepspeed --num_gpus 2 train_bert_ds.py --tiny --deepspeed_config configs/zero3.json  # 2 ranks
  deepspeed --num_gpus 2 train_bert_ds.py --deepspeed_config configs/zero3.json --num_layers 192  # [full size]
  torchrun --nproc-per-node 2 train_bert_ds.py --tiny --deepspeed_config configs/zero2.json
  srun -n 2 python train_bert_ds.py --tiny --deepspeed_config configs/zero3.json   # Slurm
  deepspeed --hostfile $HOSTFILE --launcher pdsh --master_addr $MASTER_ADDR train_bert_ds.py \\
      --tiny --deepspeed_config configs/zero2.json   # 2 nodes: lines "node1 slots=2", "node2 slots=2"
Across nodes in a Slurm job: the script that print(dltutor.launch.sites.render_job(site,
this_file, nodes=2, tasks_per_node=K, launcher=..., args=[...])) gives, with
  launcher="srun"       every rank a task of the job's srun step (SLURM_PROCID -> dltutor.core.dist)
  launcher="deepspeed"  DeepSpeed's own runner: the job writes the hostfile from its node list and
                        the runner starts each node's ranks over pdsh/ssh; the job's DLTUTOR_* and
                        OMP_NUM_THREADS reach them through a DS_ENV_FILE of the job's own (pdsh
                        passes on only MLFLOW*/PYTHON*/MV2*/UCX* and that file's lines).
A portal (a JupyterHub or Open OnDemand that submits jobs for you) uses the srun form: it needs no
ssh between compute nodes (many sites refuse it, or allow it only into nodes of your running job),
the job's environment reaches every rank as is, and every rank stays a Slurm task that Slurm
accounts, confines and kills (scancel, a dead node, --kill-on-bad-exit); ranks that pdsh starts
are outside Slurm's steps. Rank 0 prints which rank ran on which host ("ranks on hosts: ...").
On a CPU-only machine DeepSpeed needs DS_ACCELERATOR=cpu (the lab sets it through
dltutor.core.engines.engine_env()).
ZeRO-Infinity: `--deepspeed_config configs/zero3_offload_nvme.json --nvme_path /scratch/$USER/x`
(or $DLTUTOR_NVME_DIR). DeepSpeed page-locks its swap buffers: under a `ulimit -l` too small for
them (8 MiB by default for a student) the lab sizes the "auto" ones to fit and prints one line
saying so, or stops with one clear error before DeepSpeed starts (dltutor.zero.swap_buffers).
Checkpoints: `--checkpoint_dir D` saves at the end (and every
`--save_interval` steps); `--resume` continues from the latest one with the same loss curve.
`--mem-budget-mb M` lets each process allocate at most M MiB beyond its start-up memory (the OS
enforces it on a CPU; on a GPU a device cap, torch.cuda.set_per_process_memory_fraction), to show
which stage fits a budget for real.
Precision: fp32 on a CPU; on a GPU the config's "bf16" (compute capability >= 8.0) or "fp16"
(dynamic loss scaling, saved in DeepSpeed's checkpoints) section is switched on, and DeepSpeed
keeps fp32 master weights and Adam states, as the seed's formula counts.
"""
import os
import sys
import time

from dltutor.core import dist, env
from dltutor.core.device import backend, hardware_label, synchronize
from dltutor.core.hosts import shape_label
from dltutor.core.engines import apply_engine_env, build_notice
from dltutor.zero import bert_lab, budget, memory
from dltutor.zero.bert import build_bert


def main(argv=None):
    ap = bert_lab.parser(__doc__, deepspeed=True)
    args = bert_lab.parse(ap, argv)
    try:
        cfg = bert_lab.load_ds_config(args.deepspeed_config, args)
    except bert_lab.ConfigError as exc:
        ap.error(str(exc))  # one clear line and exit code 2, before any process group
    apply_engine_env()                                    # DeepSpeed: DS_ACCELERATOR, op cache
    import deepspeed  # DeepSpeed: imported after DS_ACCELERATOR is fixed
    if problem := bert_lab.nvme_problem(cfg):             # DeepSpeed: NVMe needs libaio
        ap.error(problem)

    ctx = dist.init(group_of_one=True)  # DeepSpeed: process group (gloo/nccl), even of one
    if notice := build_notice(bert_lab.ops_used(cfg)):   # DeepSpeed: an op it will compile first
        dist.rank_print(notice, main_only=True)
    deepspeed.init_distributed(dist_backend=backend())  # DeepSpeed: reuse it
    hosts = dist.print_hosts()                            # DeepSpeed: rank 0 names every rank's host
    budget_bytes = budget.apply_budget(args.mem_budget_mb, dev=ctx.device)  # GPU: a device cap
    result = run(args, cfg, ctx)
    if result["samples_per_s"] is not None:
        dist.rank_print(f"{result['samples_per_s']:.1f} samples/s on {shape_label(hosts)} "
                        f"({hardware_label(ctx.device)})", main_only=True)
    dist.report(**result, budget_bytes=budget_bytes, hosts=hosts, shape=shape_label(hosts))
    dist.teardown()


def run(args, cfg, ctx) -> dict:
    """Build, (resume,) train `args.num_iterations` steps with `cfg`; return the metrics."""
    import deepspeed
    import torch
    from deepspeed.utils.logging import set_log_level_from_string
    stage = cfg["zero_optimization"].get("stage", 0)
    at_start = budget.reset_peak(ctx.device)             # GPU: this config's own peak from here
    dtype = bert_lab.torch_dtype(bert_lab.resolve_dtype(args))  # DeepSpeed: its fp16/bf16 section
    env.seed_everything(args.seed, 0)                    # same initial weights on every rank
    phase = "model construction"
    try:
        # DeepSpeed: at stage 3 each layer is partitioned as it is built (no full copy anywhere)
        with deepspeed.zero.Init(enabled=stage == 3, config_dict_or_path=cfg):
            model = build_bert(**bert_lab.model_flags(args))
        n_params = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
        phase = "deepspeed.initialize"
        engine, _, _, _ = deepspeed.initialize(           # DeepSpeed: wraps model + optimizer
            model=model, model_parameters=model.parameters(), config=cfg)
        # DeepSpeed: its step / RunningAvgSamplesPerSec / MemAllocated lines are INFO messages
        set_log_level_from_string(args.ds_log_level)
        start = 0
        if args.resume:
            path, client = engine.load_checkpoint(args.checkpoint_dir, tag=args.resume_tag)
            if path is None:                              # DeepSpeed: nothing to resume from
                raise FileNotFoundError(f"no DeepSpeed checkpoint in {args.checkpoint_dir}")
            start = int(client["step"])
        meter = memory.ModelStateMeter(engine.module, engine.optimizer)
        losses, t0, timed, step_s = [], None, 0, []
        for step in range(start, args.num_iterations):
            phase = f"iteration {step}"
            if step >= start + 1:
                synchronize(engine.device)
                now = time.perf_counter()
                step_s += [now - t_step] if step > start + 1 else []   # each timed step alone
                t0, t_step = t0 or now, now
            tokens, labels = bert_lab.rank_batch(args, ctx, step, engine.device)
            if step == args.measure_iter:
                meter.arm()
            loss = engine(tokens, labels)
            engine.backward(loss)                         # DeepSpeed: reduce(-scatter) grads
            meter.disarm()
            meter.sample()
            engine.step()                                 # DeepSpeed: partitioned Adam step
            losses.append(dist_mean(loss.detach().float(), ctx))
            timed += step > start
            if args.checkpoint_dir and (step + 1 == args.num_iterations or (
                    args.save_interval and (step + 1) % args.save_interval == 0)):
                engine.save_checkpoint(args.checkpoint_dir, tag=f"step{step + 1}",
                                       client_state={"step": step + 1})
        synchronize(engine.device)
        elapsed = time.perf_counter() - t0 if t0 else float("nan")
        step_s += [time.perf_counter() - t_step] if t0 else []
    except (RuntimeError, MemoryError) as exc:
        bert_lab.report_oom(phase, exc)
        raise
    est = memory.estimate_zero_memory(n_params, k_l=torch.finfo(dtype).bits // 8, k_h=4,
                                      d=ctx.world_size, z=stage)
    out = dict(lab="train_bert_ds", stage=stage, offload=bert_lab.offload_mode(cfg),
               dtype=args.dtype, params=n_params, start_step=start, losses=losses,
               samples_per_s=timed * args.batch_size * ctx.world_size / elapsed if timed
               else None, step_s=step_s, model_state_bytes=meter.peak, predicted=est.as_dict(),
               allocated_at_start=at_start, **memory.peak_memory_bytes(engine.device))
    bert_lab.release_engine(engine)      # DeepSpeed: destroy it and drop it from its module stack
    return out


def dist_mean(value, ctx):
    """The loss averaged over ranks (each rank saw its own batch), as a float."""
    import torch.distributed as tdist
    if ctx.is_distributed:
        value = value.clone()
        tdist.all_reduce(value)                           # DeepSpeed: for the printout only
        value /= ctx.world_size
    return float(value)


if __name__ == "__main__":
    sys.exit(main())
