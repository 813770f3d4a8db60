"""One process group, two engines: DeepSpeed ZeRO stage 0, then PyTorch FSDP2, same flags.

Run by tests/test_fsdp.py through dltutor.launch.run (torchrun, 2 gloo ranks):
    fsdp_equiv_worker.py <train_bert_ds.py flags without --deepspeed_config>
Stage 0 goes through the lab's own code (sweep_zero.py's `plan` and train_bert_ds.py's `run`);
FSDP2 through dltutor.zero.fsdp.run, the code of train_bert_fsdp.py. Each rank reports one
DLTUTOR_METRICS line per engine (`config=zero0` / `config=fsdp2`).
"""
import os
import sys

from dltutor.core import dist
from dltutor.core.device import backend
from dltutor.core.engines import engine_env
from dltutor.zero import fsdp

from deepspeed_zero_worker import sweep_module  # tests/ is this script's folder



def main():
    sweep = sweep_module()
    (_, args, cfg), = sweep.plan(["zero0"], sys.argv[1:])
    for key, value in engine_env().items():
        os.environ.setdefault(key, value)
    import deepspeed

    ctx = dist.init(group_of_one=True)
    deepspeed.init_distributed(dist_backend=backend())
    try:
        dist.report(config="zero0", **sweep.lab_run()(args, cfg, ctx))
        out, _, _ = fsdp.run(args, ctx)
        dist.report(config="fsdp2", **out)
    finally:
        dist.teardown()


if __name__ == "__main__":
    sys.exit(main())
