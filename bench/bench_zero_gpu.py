"""Lab 04 on one GPU: predicted memory against torch.cuda.max_memory_allocated per ZeRO stage, and
a real CUDA out-of-memory error with the batch sized from the GPU's free memory, then the fix.

    python3 bench/bench_zero_gpu.py --json out.json          # on a GPU node (refuses without one)
    python3 bench/bench_zero_gpu.py --part stages            # only the stage table
    python3 bench/bench_zero_gpu.py --part oom               # only the OOM and its fix

Stages: one launch of course/labs/04_deepspeed/sweep_zero.py (1 rank, bf16 on GPUs that have it)
runs configs zero0..zero3; each config resets the GPU's peak (dltutor.zero.budget.reset_peak) and
reports max_memory_allocated. Predicted is the course's formula with activations,
memory.estimate_zero_memory(p, k_l, 4, d=1, z, s, b, h, L, a).total, once with gradients in the
training precision (k_g = k_l, as notebook 04 teaches) and once with an fp32 copy beside them
(k_g = k_l + k_h: DeepSpeed's bf16 path keeps fp32 gradient buffers); measured is the peak minus what was allocated
when the config started. Goal: within 10 %.

OOM: no memory cap and no RLIMIT: the plain lab train_bert.py is first run at micro-batch 1 and 2
to measure what one more sample costs on this GPU (the lab's own max_memory_allocated); the
batch is then sized so that the run needs about 1.2 x the GPU's free memory, and the plain run
dies in CUDA's allocator ("CUDA out of memory"). The fix: the same global batch through
train_bert_ds.py (ZeRO-2 config) with gradient accumulation, micro-batches small enough to fit
(activations are never partitioned, so on one GPU it is the micro-batch that must shrink).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                 # a checkout, not installed

from dltutor.core.units import GiB  # noqa: E402
from dltutor.zero import memory, runs  # noqa: E402

from bench_result import emit  # noqa: E402

LAB = ROOT / "course" / "labs" / "04_deepspeed"
STAGE_SIZES = dict(num_layers=24, h_dim=2048, ff_dim=8192, num_heads=16, vocab=30522, seq_len=512,
                   batch_size=4, num_iterations=3)
OOM_SIZES = dict(num_layers=24, h_dim=1024, ff_dim=4096, num_heads=16, vocab=30522, seq_len=512,
                 num_iterations=2)
OVERSHOOT = 1.2          # the plain run is sized to need this many times the free memory


def stage_rows(sizes: dict = STAGE_SIZES) -> list[dict]:
    """Predicted (formula with activations) vs measured GPU peak, zero0..zero3 on one GPU."""
    configs = ["zero0", "zero1", "zero2", "zero3"]
    _, res = runs.sweep(configs, 1, sizes)
    by = {m["config"]: m for m in res.metrics if m.get("rank", 0) == 0}
    return [stage_row(by[c], sizes) for c in configs]


def stage_row(r: dict, sizes: dict) -> dict:
    """One stage: the formula as the course teaches it (gradients in the training precision,
    k_g = k_l) and with an fp32 copy of the gradients beside them (k_g = k_l + k_h), which is
    what DeepSpeed's bf16 path keeps (BF16_Optimizer's fp32 gradient buffers at stage 0)."""
    k_l = 2 if r.get("dtype") in ("bf16", "fp16") else 4
    act = dict(s=sizes["seq_len"], b=sizes["batch_size"], h=sizes["h_dim"], L=sizes["num_layers"],
               a=sizes["num_heads"])
    est = memory.estimate_zero_memory(r["params"], k_l=k_l, k_h=4, d=1, z=r["stage"], **act)
    fp32 = memory.estimate_zero_memory(r["params"], k_l=k_l, k_h=4, d=1, z=r["stage"], k_g=k_l + 4,
                                       **act)
    measured = r["max_memory_allocated"] - r.get("allocated_at_start", 0)
    held = (r.get("model_state_bytes") or {}).get("total", 0)
    return dict(config=r["config"], stage=r["stage"], dtype=r.get("dtype"), params=r["params"],
                predicted_GiB=round(est.total / GiB, 3),
                predicted_model_states_GiB=round(est.model_states / GiB, 3),
                predicted_activations_GiB=round(est.M_a / GiB, 3),
                predicted_fp32_grads_GiB=round(fp32.total / GiB, 3),
                measured_GiB=round(measured / GiB, 3), model_states_held_GiB=round(held / GiB, 3),
                ratio=round(measured / est.total, 3), within_10pct=abs(measured / est.total - 1) <= 0.10,
                ratio_fp32_grads=round(measured / fp32.total, 3))


def plain(batch: int, sizes: dict = OOM_SIZES) -> dict:
    """train_bert.py (plain PyTorch, no cap) at `batch`: {ok, peak, oom, lines, error}."""
    from dltutor.launch.results import LaunchError
    try:
        row, res = runs.run_config("plain", 1, {**sizes, "batch_size": batch})
    except LaunchError as exc:
        lines = runs.allocator_lines(runs._log_text(exc.result))
        return dict(ok=False, batch=batch, oom=bool(lines), lines=lines[-3:],
                    error=str(exc).strip().splitlines()[0][:300])
    m = res.metrics[0]
    return dict(ok=True, batch=batch, oom=False, losses=m.get("losses"),
                peak=m["max_memory_allocated"] - m.get("allocated_at_start", 0))


def accumulated(batch: int, steps: int, sizes: dict = OOM_SIZES) -> dict:
    """train_bert_ds.py (ZeRO-2 config) at micro-batch `batch` x `steps` accumulation steps."""
    cfg = json.loads((LAB / "configs" / "zero2.json").read_text())
    cfg["gradient_accumulation_steps"] = steps
    with tempfile.TemporaryDirectory(prefix="dltutor-gas-") as tmp:
        path = Path(tmp) / f"zero2_gas{steps}.json"
        path.write_text(json.dumps(cfg))
        args = runs.size_flags({**sizes, "batch_size": batch, "num_iterations": 2 * steps})
        res = runs.launch(str(LAB / "train_bert_ds.py"), nproc=1, env=runs._ds_env(),
                          args=args + ["--deepspeed_config", str(path)], echo=False, timeout=900)
    m = res.metrics[0]
    return dict(ok=True, micro_batch=batch, accumulation_steps=steps, global_batch=batch * steps,
                optimizer_steps=2, peak=m["max_memory_allocated"] - m.get("allocated_at_start", 0),
                losses=m.get("losses"))


def oom_and_fix() -> dict:
    """Size the plain run from the GPU's free memory, watch it fail, then fit the same batch."""
    import torch
    one, two = plain(1), plain(2)
    if not (one["ok"] and two["ok"]):
        raise RuntimeError(f"the calibration runs failed: {one} {two}")
    per_sample = two["peak"] - one["peak"]
    base = one["peak"] - per_sample
    free, total = torch.cuda.mem_get_info()
    batch = math.ceil((OVERSHOOT * free - base) / per_sample)
    fail = plain(batch)
    fits = max(1, int((0.6 * free - base) // per_sample))     # micro-batch well inside free
    steps = math.ceil(batch / fits)
    micro = math.ceil(batch / steps)
    fix = accumulated(micro, steps)
    return dict(free_GiB=round(free / GiB, 2), total_GiB=round(total / GiB, 2),
                base_GiB=round(base / GiB, 3), per_sample_GiB=round(per_sample / GiB, 4),
                overshoot=OVERSHOOT, oom_batch=batch,
                predicted_need_GiB=round((base + batch * per_sample) / GiB, 2), oom=fail,
                fix={**fix, "peak_GiB": round(fix["peak"] / GiB, 2)})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--part", choices=("all", "stages", "oom"), default="all")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("bench_zero_gpu: no GPU visible; this measures GPU memory (run it on a GPU node)")
        return 1
    out = dict(bench="zero_gpu", device=torch.cuda.get_device_name(0))
    if args.part in ("all", "stages"):
        out["stages"] = stage_rows()
        print(f"{'config':8s} {'predicted GiB':>14s} {'(fp32 grads)':>13s} {'measured GiB':>13s} "
              f"{'ratio':>6s} {'(fp32 grads)':>12s}")
        for r in out["stages"]:
            print(f"{r['config']:8s} {r['predicted_GiB']:14.2f} {r['predicted_fp32_grads_GiB']:13.2f} "
                  f"{r['measured_GiB']:13.2f} {r['ratio']:6.2f} {r['ratio_fp32_grads']:12.2f}"
                  f"{'' if r['within_10pct'] else '  (outside 10 %)'}")
    if args.part in ("all", "oom"):
        o = out["oom"] = oom_and_fix()
        f = o["fix"]
        print(f"free {o['free_GiB']} GiB; one more sample costs {o['per_sample_GiB']} GiB; plain run "
              f"at batch {o['oom_batch']} needs about {o['predicted_need_GiB']} GiB: "
              f"{'CUDA OUT OF MEMORY' if o['oom']['oom'] else 'did not fail: ' + str(o['oom'])}")
        for line in o["oom"].get("lines", []):
            print("   ", line[:300])
        print(f"fix: micro-batch {f['micro_batch']} x {f['accumulation_steps']} accumulation steps "
              f"= global batch {f['global_batch']}, peak {f['peak_GiB']} GiB, losses {f['losses']}")
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
