"""Train the BERT-style masked-LM with PyTorch's own sharding, FSDP2 (`fully_shard`).

Same model, seed, data and Adam as train_bert.py / train_bert_ds.py; every parameter, gradient
and Adam moment is a shard (a DTensor) of which each rank holds 1/world_size. In fp32 the loss
trajectory equals ZeRO stage 0's; each rank reports the model-state bytes it really held.

Launch forms (run in this lab's folder; each rank prints one `DLTUTOR_METRICS {json}` line):
  torchrun --nproc-per-node 2 train_bert_fsdp.py --tiny        # 2 gloo ranks (nccl on GPUs)
  python train_bert_fsdp.py --tiny                             # one process: a group of one
  torchrun --nproc-per-node 8 train_bert_fsdp.py --num_layers 24 --dtype bf16   # [full size]
  srun -n 2 python train_bert_fsdp.py --tiny                   # Slurm
--dtype auto: mixed precision on GPUs (MixedPrecisionPolicy with core.device.amp_dtype: bf16 on
Ampere and newer, fp16 before; shards and gradient reduction stay fp32), fp32 on CPUs.
`--checkpoint_dir D` saves a sharded torch.distributed.checkpoint at the end.
"""
import sys

from dltutor.core import dist
from dltutor.zero import bert_lab, budget, fsdp


def save(model, opt, path) -> None:
    """Each rank writes its own shards (torch.distributed.checkpoint), no full copy anywhere."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model_sd, optim_sd = get_state_dict(model, opt)                 # FSDP: sharded state dicts
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)  # FSDP: per-rank files


def main(argv=None):
    args = bert_lab.parse(bert_lab.parser(__doc__), argv)
    import torch.distributed as tdist
    ctx = dist.init(group_of_one=True)                # FSDP: a process group, even of one
    try:
        budget_bytes = budget.apply_budget(args.mem_budget_mb, dev=ctx.device)  # GPU: a device cap
        out, model, opt = fsdp.run(args, ctx)
        if args.checkpoint_dir:
            save(model, opt, args.checkpoint_dir)
        dist.report(**out, budget_bytes=budget_bytes)
        tdist.barrier()                               # FSDP: no rank leaves while a peer runs
    finally:
        dist.teardown()


if __name__ == "__main__":
    sys.exit(main())
