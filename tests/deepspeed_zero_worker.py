"""One launch, many checks: train the lab's BERT with several DeepSpeed configs in one process group.

Run by tests/test_deepspeed_zero.py through dltutor.launch (torchrun, 2 gloo ranks):
    deepspeed_zero_worker.py --ckpt DIR -- <train_bert_ds.py flags without --deepspeed_config>
For each config of configs/zero{0,1,2,3}.json it calls the lab's own `run()` (the code a student
runs) and reports its metrics with `config=<name>`; then it resumes the stage-3 run from its
mid-run checkpoint (`--save_interval`) and reports that as `config=zero3_resumed`.
"""
import argparse
import importlib.util
import os
import sys
from pathlib import Path

from dltutor import bertlab, dist, env
from dltutor.engines import engine_env

LAB = Path(__file__).resolve().parents[1] / "course" / "labs" / "04_deepspeed"


def lab_module():
    spec = importlib.util.spec_from_file_location("train_bert_ds", LAB / "train_bert_ds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ours = argparse.ArgumentParser()
    ours.add_argument("--ckpt", required=True)
    ours.add_argument("--configs", default="zero0,zero1,zero2,zero3")
    mine, lab_argv = ours.parse_known_args()
    lab_argv = [a for a in lab_argv if a != "--"]
    for key, value in engine_env().items():
        os.environ.setdefault(key, value)
    import deepspeed
    lab = lab_module()
    ctx = dist.init()
    deepspeed.init_distributed(dist_backend=env.backend())
    half = None
    for name in mine.configs.split(","):
        extra = []
        if name == "zero3":
            args_probe = bertlab.parse(bertlab.parser("x", deepspeed=True),
                                       lab_argv + ["--deepspeed_config", "x"])
            half = args_probe.num_iterations // 2
            extra = ["--checkpoint_dir", mine.ckpt, "--save_interval", str(half)]
        argv = lab_argv + ["--deepspeed_config", str(LAB / "configs" / f"{name}.json")] + extra
        ap = bertlab.parser("worker", deepspeed=True)
        args = bertlab.parse(ap, argv)
        cfg = bertlab.load_ds_config(args.deepspeed_config, args)
        dist.report(config=name, **lab.run(args, cfg, ctx))
    if half:
        argv = lab_argv + ["--deepspeed_config", str(LAB / "configs" / "zero3.json"),
                           "--checkpoint_dir", mine.ckpt, "--resume", "--resume_tag",
                           f"step{half}"]
        args = bertlab.parse(bertlab.parser("worker", deepspeed=True), argv)
        cfg = bertlab.load_ds_config(args.deepspeed_config, args)
        dist.report(config="zero3_resumed", **lab.run(args, cfg, ctx))
    dist.teardown()


if __name__ == "__main__":
    sys.exit(main())
