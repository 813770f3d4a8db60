"""One launch, many checks: train the lab's BERT with several DeepSpeed configs in one process group.

Run by tests/test_deepspeed_zero.py through dltutor.launch.run (torchrun, 2 gloo ranks):
    deepspeed_zero_worker.py --ckpt DIR -- <train_bert_ds.py flags without --deepspeed_config>
It is the lab's own sweep (course/labs/04_deepspeed/sweep_zero.py: `plan` + `run_all`, the code
a student runs) over configs zero0..zero3, where the stage-3 run also saves a mid-run checkpoint
(`--save_interval`), plus one more run resumed from that checkpoint, reported as
`config=zero3_resumed`.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[1] / "course" / "labs" / "04_deepspeed" / "sweep_zero.py"


def sweep_module():
    spec = importlib.util.spec_from_file_location("sweep_zero", SWEEP)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ours = argparse.ArgumentParser()
    ours.add_argument("--ckpt", required=True)
    ours.add_argument("--configs", default="zero0,zero1,zero2,zero3")
    mine, lab_argv = ours.parse_known_args()
    lab_argv = [a for a in lab_argv if a != "--"]
    sweep = sweep_module()
    names = mine.configs.split(",")
    plans = sweep.plan([n for n in names if n != "zero3"], lab_argv)
    if "zero3" in names:
        half = sweep.plan(["zero3"], lab_argv)[0][1].num_iterations // 2
        ckpt = ["--checkpoint_dir", mine.ckpt]
        plans += sweep.plan(["zero3"], lab_argv + ckpt + ["--save_interval", str(half)])
        (_, args, cfg), = sweep.plan(["zero3"], lab_argv + ckpt + ["--resume", "--resume_tag",
                                                                    f"step{half}"])
        plans.append(("zero3_resumed", args, cfg))
    sweep.run_all(plans)


if __name__ == "__main__":
    sys.exit(main())
