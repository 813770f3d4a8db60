"""ZeRO in one run: per-rank model-state memory of stage 3 over 2 ranks vs stage 0, and the
samples/s of every stage and offload mode relative to stage 0.

    .venv/bin/python bench/bench_zero.py [--num_layers 8 --h_dim 128 ...]   (flags of the lab)

Each row is a launch of course/labs/04_deepspeed/train_bert_ds.py (2 ranks; NVMe offload on 1
rank with a scratch dir under the system temp dir). Memory is the model-state bytes the lab
measured (parameters + gradients + optimizer tensors held per rank); goal: stage 3 <= 1.2 x 1/2
of stage 0. Speeds are ratios to stage 0 measured side by side on this machine.
"""
import sys
import tempfile
from pathlib import Path

from dltutor.engines import engine_env
from dltutor.launch import launch

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "course" / "labs" / "04_deepspeed"
DEFAULT = ["--dtype", "fp32", "--num_layers", "8", "--h_dim", "128", "--ff_dim", "512",
           "--vocab", "128", "--seq_len", "32", "--batch_size", "4", "--num_iterations", "6"]
RUNS = [("zero0", 2), ("zero1", 2), ("zero2", 2), ("zero3", 2), ("zero3_offload_cpu", 2),
        ("zero3_offload_nvme", 1)]


def main(argv):
    size = argv or DEFAULT
    rows = {}
    with tempfile.TemporaryDirectory(prefix="dltutor-nvme-") as scratch:
        for name, nproc in RUNS:
            args = size + ["--deepspeed_config", str(LAB / "configs" / f"{name}.json")]
            if "nvme" in name:
                args += ["--nvme_path", scratch]
            try:
                res = launch(str(LAB / "train_bert_ds.py"), nproc=nproc, args=args,
                             env=engine_env(), echo=False, timeout=1800)
            except Exception as exc:  # one mode failing must not hide the others' figures
                print(f"{name:20s} FAILED: {str(exc).splitlines()[0]}")
                continue
            m = res.metrics[0]
            rows[name] = dict(ranks=nproc, state=m["model_state_bytes"]["total"],
                              pred=m["predicted"]["model_states"], sps=m["samples_per_s"])
    base = rows.get("zero0")
    print(f"{'config':20s} ranks  model-state MiB/rank  formula MiB  vs stage0  samples/s  "
          "speed vs stage0")
    for name, r in rows.items():
        rel_mem = r["state"] / base["state"] if base else float("nan")
        rel_sps = r["sps"] / base["sps"] if base else float("nan")
        print(f"{name:20s} {r['ranks']:5d}  {r['state'] / 2**20:19.2f}  {r['pred'] / 2**20:11.2f}"
              f"  {rel_mem:8.3f}  {r['sps']:9.2f}  {rel_sps:15.3f}")
    if base and "zero3" in rows:
        ratio = rows["zero3"]["state"] / base["state"]
        print(f"stage 3 over 2 ranks holds {ratio:.3f} x stage 0's model states per rank "
              f"(goal <= {1.2 * 0.5:.2f}): {'MET' if ratio <= 0.6 else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
