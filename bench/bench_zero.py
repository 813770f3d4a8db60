"""ZeRO in one run: per-rank model-state memory of stage 3 (and PyTorch FSDP2) over 2 ranks vs
stage 0, and the samples/s of every stage and offload mode relative to stage 0.

    .venv/bin/python bench/bench_zero.py                    (fp32, the default size below)
    .venv/bin/python bench/bench_zero.py --dtype fp16       (any lab flag overrides the default)
    .venv/bin/python bench/bench_zero.py --dtype bf16 --num_layers 12

Three launches: course/labs/04_deepspeed/sweep_zero.py runs stages 0-3 and stage 3 + CPU offload
one after the other in one 2-rank process group; train_bert_ds.py runs ZeRO-Infinity NVMe
offload on 1 rank (scratch dir under the system temp dir); train_bert_fsdp.py runs PyTorch FSDP2
on 2 ranks, its memory set beside ZeRO-3's. Memory is the model-state bytes the
lab measured (parameters + gradients + optimizer tensors held by rank 0); goal: stage 3 <= 1.2 x
1/2 of stage 0. Speeds (samples/s of all ranks together) are ratios to stage 0 measured side by
side on this machine, in the same run.
"""
import sys
import tempfile

from dltutor.core.device import hardware_label  # noqa: E402
from dltutor.zero import runs

# h_dim 512: every weight matrix is >= 1 MiB, the aio block size below which DeepSpeed keeps a
# tensor in RAM instead of swapping it to NVMe (smaller models would not go out of core at all)
DEFAULT = ["--dtype", "fp32", "--num_layers", "6", "--h_dim", "512", "--ff_dim", "2048",
           "--vocab", "512", "--seq_len", "32", "--batch_size", "4", "--num_iterations", "5"]
SWEEP = ["zero0", "zero1", "zero2", "zero3", "zero3_offload_cpu"]


def _sizes(argv):
    flags = DEFAULT + list(argv)                     # later flags win, as in argparse
    return {flags[i].lstrip("-"): flags[i + 1] for i in range(0, len(flags) - 1, 2)}


def main(argv):
    sizes = _sizes(argv)
    rows = []
    try:
        rows, _ = runs.sweep(SWEEP, 2, sizes, timeout=1800)
    except Exception as exc:  # one mode failing must not hide the others' figures
        print(f"sweep FAILED: {str(exc).splitlines()[0]}")
    with tempfile.TemporaryDirectory(prefix="dltutor-nvme-") as scratch:
        try:
            rows.append(runs.run_config("zero3_offload_nvme", 1, sizes, nvme_dir=scratch,
                                           timeout=1800)[0])
        except Exception as exc:
            print(f"zero3_offload_nvme FAILED: {str(exc).splitlines()[0]}")
    try:
        rows.append(runs.run_fsdp2(2, sizes, timeout=1800)[0])   # PyTorch FSDP2, same sizes
    except Exception as exc:
        print(f"fsdp2 FAILED: {str(exc).splitlines()[0]}")
    runs.with_speed_ratio(rows)
    print(f"sizes {sizes}  [{hardware_label()}]")
    print(f"{'config':20s} ranks  model-state MiB/rank  formula MiB  vs stage0  samples/s  "
          "speed vs stage0")
    for r in rows:
        mem = r["memory_vs_stage0"] if r["memory_vs_stage0"] is not None else float("nan")
        spd = r["speed_vs_stage0"] if r["speed_vs_stage0"] is not None else float("nan")
        print(f"{r['config']:20s} {r['ranks']:5d}  {r['measured']:19.2f}  {r['predicted']:11.2f}"
              f"  {mem:8.3f}  {r['samples_per_s'] or float('nan'):9.2f}  {spd:15.3f}")
    by = {r["config"]: r for r in rows}
    if "zero0" in by and "zero3" in by:
        ratio = by["zero3"]["measured"] / by["zero0"]["measured"]
        print(f"stage 3 over 2 ranks holds {ratio:.3f} x stage 0's model states per rank "
              f"(goal <= {1.2 * 0.5:.2f}): {'MET' if ratio <= 0.6 else 'NOT MET'}")
    if "zero3" in by and "fsdp2" in by:
        f, z = by["fsdp2"], by["zero3"]
        print(f"FSDP2 over 2 ranks holds {f['measured'] / z['measured']:.3f} x ZeRO-3's model "
              f"states per rank (formulas: {f['predicted'] / z['predicted']:.3f} x); FSDP2 "
              f"measured / its formula {f['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
