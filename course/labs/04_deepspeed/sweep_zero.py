"""Train the same BERT with several DeepSpeed configs in ONE process group: stages side by side.

Each config runs through train_bert_ds.py's own `run()` (the code of the single-config lab), one
after the other, and every rank prints one `DLTUTOR_METRICS {json}` line per config with
`config=<name>`. Process start-up and DeepSpeed's import are paid once, so comparing five configs
costs about one launch. No memory budget here: that is train_bert.py / train_bert_ds.py's job.
`--rounds R` runs every config R times, in rotated order, odd rounds reversed (A B C, B A C,
C A B, C B A, ...), so a slow minute of a shared machine hits every config alike, no config always
follows the same one, and the speeds can be compared over the R repeats; each line then also
carries `round=<r>`.

Launch forms (run in this lab's folder):
  torchrun --nproc-per-node 2 sweep_zero.py --tiny                         # 2 gloo/nccl ranks
  torchrun --nproc-per-node 2 sweep_zero.py --tiny --configs zero0,zero3   # two configs only
  torchrun --nproc-per-node 2 sweep_zero.py --tiny --rounds 3    # each config 3 times, rotated
  deepspeed --num_gpus 2 sweep_zero.py --num_layers 24 --configs zero0,zero1,zero2,zero3  # [full size]
  srun -n 2 python sweep_zero.py --tiny                                     # Slurm
  python sweep_zero.py --tiny                                               # one process, d = 1
Configs are names of configs/*.json; NVMe offload needs --nvme_path (or $DLTUTOR_NVME_DIR).
"""
import importlib.util
import os
import sys
from pathlib import Path

from dltutor.core import dist, flags
from dltutor.core.device import backend
from dltutor.core.engines import apply_engine_env, build_notice
from dltutor.core.rounds import rotations
from dltutor.zero import bert_lab

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIGS = "zero0,zero1,zero2,zero3,zero3_offload_cpu"
TINY_CONFIGS = "zero0,zero3"   # CI: the two ends; CPU offload alone takes a minute on 2 cores


def lab_run():
    """train_bert_ds.run, loaded from the file beside this one."""
    spec = importlib.util.spec_from_file_location("train_bert_ds", HERE / "train_bert_ds.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.run


def plan(names, argv, ap=None) -> list:
    """(name, args, DeepSpeed config) for each config name with the lab flags `argv`; every
    config is read and checked here, before any process group exists (one clear error)."""
    ap = ap or bert_lab.parser("sweep", deepspeed=True)
    plans = []
    for name in names:
        config = HERE / "configs" / f"{name}.json"
        args = bert_lab.parse(ap, list(argv) + ["--deepspeed_config", str(config)])
        try:
            plans.append((name, args, bert_lab.load_ds_config(args.deepspeed_config, args)))
        except bert_lab.ConfigError as exc:
            ap.error(str(exc))
    return plans


def rotated(plans, rounds: int = 1) -> list:
    """(round, plan) in the order to run them: round r is `plans` rotated by r, odd rounds in the
    reverse direction, so over an even number of rounds each config follows its neighbour on
    either side equally often (not always the same one: its carry-over is balanced)."""
    orders = [fwd if r % 2 == 0 else back for r, (fwd, back) in
              enumerate(zip(rotations(plans, rounds), rotations(list(plans)[::-1], rounds)))]
    return [(r, plan) for r, order in enumerate(orders) for plan in order]


def run_all(plans, rounds: int = 1) -> None:
    """One process group; each plan through train_bert_ds.run `rounds` times, in rotated order
    (`rotated`), one DLTUTOR_METRICS line each."""
    apply_engine_env()  # DeepSpeed: DS_ACCELERATOR, op cache
    import deepspeed  # DeepSpeed: imported after DS_ACCELERATOR is fixed

    run = lab_run()
    ctx = dist.init(group_of_one=True)  # DeepSpeed: one process group (even of one)...
    ops = dict.fromkeys(op for _, _, cfg in plans for op in bert_lab.ops_used(cfg))
    if notice := build_notice(list(ops)):                 # DeepSpeed: ops it will compile first
        dist.rank_print(notice, main_only=True)
    deepspeed.init_distributed(dist_backend=backend())  # DeepSpeed: ...for every config
    try:
        for r, (name, args, cfg) in rotated(plans, rounds):
            dist.report(config=name, round=r, **run(args, cfg, ctx))
    finally:
        dist.teardown()


def main(argv=None):
    ours = flags.parser(__doc__, add_help=False)
    known = sorted(p.stem for p in (HERE / "configs").glob("*.json"))
    ours.add_argument("--configs", type=flags.choice_list(known), default=None,
                      help=f"comma-separated names of configs/*.json, run in this order (default "
                           f"{DEFAULT_CONFIGS}; with --tiny {TINY_CONFIGS})")
    ours.add_argument("--rounds", type=int, default=1,
                      help="run every config this many times, rotating the order each round "
                           "(default 1)")
    mine, rest = ours.parse_known_args(argv)
    if mine.configs is None:
        mine.configs = (TINY_CONFIGS if "--tiny" in rest else DEFAULT_CONFIGS).split(",")
    if "-h" in rest or "--help" in rest:
        ours.print_help()
        print("\nAll other flags are train_bert_ds.py's (without --deepspeed_config):")
    run_all(plan(mine.configs, rest), max(1, mine.rounds))


if __name__ == "__main__":
    sys.exit(main())
