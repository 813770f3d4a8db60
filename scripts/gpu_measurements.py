"""The measurements section of a GPU verification record: the --json outputs of the bench/
scripts a GPU check runs (scripts/gpu_record.py merge --measurement ...), as Markdown tables.

Every number printed here is one of those files' own; the reference figures (the seed's V100
img/s, the 790 TFLOP/s bf16 figure) are labelled as references.
"""
from __future__ import annotations

GiB = 2 ** 30


def _table(head: list[str], rows: list[list]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(str(x) for x in r) + " |" for r in rows])


def time_to_accuracy(ms: list[dict]) -> list[str]:
    out = ["### Notebook 01's fast path: seconds of training to 90 % test accuracy",
           "", "`bench/bench_time_to_accuracy.py`: real Fashion-MNIST (60,000 / 10,000 images), "
           "data on the device, channels_last, AMP where the device has it; evaluation time "
           "apart. Same model, batch, schedule and seed on each device.", ""]
    rows = [[m["device"], m["width"], m["batch_size"], m["precision"],
             m["seconds_to_target"] if m["reached"] else f"not reached ({m['final_acc']})",
             m["steps_to_target"] or "-", m["eval_seconds"], m["threads"]] for m in ms]
    out += _table(["device", "ResNet width", "batch", "precision", "s to 90 %", "steps",
                   "eval s", "CPU threads"], rows)
    gpu = {m["width"]: m for m in ms if m["hardware"].startswith("GPU") and m["reached"]}
    cpu = {m["width"]: m for m in ms if not m["hardware"].startswith("GPU") and m["reached"]}
    for w in sorted(set(gpu) & set(cpu)):
        out.append(f"\nWidth {w}: the GPU reached 90 % in {gpu[w]['seconds_to_target']} s, the "
                   f"CPU in {cpu[w]['seconds_to_target']} s: "
                   f"{cpu[w]['seconds_to_target'] / gpu[w]['seconds_to_target']:.0f} x.")
    return out


def zero_gpu(m: dict) -> list[str]:
    out = [f"### Lab 04 on one GPU ({m['device']})", "",
           "`bench/bench_zero_gpu.py`. Predicted: the course's formula with activations "
           "(`dltutor.zero.memory.estimate_zero_memory`, k_l = 2, k_h = 4, d = 1). Measured: "
           "`torch.cuda.max_memory_allocated` of the config minus what was allocated when it "
           "started. Goal: within 10 %.", ""]
    if m.get("stages"):
        rows = [[r["config"], f"{r['params']:,}", r["predicted_model_states_GiB"],
                 r["predicted_activations_GiB"], r["predicted_GiB"], r["measured_GiB"],
                 r["ratio"], "yes" if r["within_10pct"] else "no",
                 r.get("predicted_fp32_grads_GiB", "-"), r.get("ratio_fp32_grads", "-")]
                for r in m["stages"]]
        out += _table(["config", "parameters", "model states GiB", "activations GiB",
                       "predicted GiB", "measured GiB", "measured / predicted", "within 10 %",
                       "predicted with fp32 gradient copy GiB", "measured / that"], rows)
    o = m.get("oom")
    if o:
        f = o["fix"]
        out += ["", f"Out of memory for real, no cap: {o['free_GiB']} GiB free of "
                    f"{o['total_GiB']}; the plain lab (`train_bert.py`) measured "
                    f"{o['per_sample_GiB']} GiB per extra sample over {o['base_GiB']} GiB, so "
                    f"batch {o['oom_batch']} needs about {o['predicted_need_GiB']} GiB "
                    f"({o['overshoot']} x the free memory). Result: "
                    f"{'CUDA out of memory' if o['oom']['oom'] else 'no failure'}:", ""]
        out += [f"    {line[:240]}" for line in o["oom"].get("lines", [])[:2]]
        out += ["", f"The fix: the same global batch {f['global_batch']} as micro-batch "
                    f"{f['micro_batch']} x {f['accumulation_steps']} gradient-accumulation steps "
                    f"(`train_bert_ds.py`, ZeRO-2 config): trained, peak {f['peak_GiB']} GiB, "
                    f"losses {', '.join(f'{x:.4f}' for x in f['losses'])}."]
    return out


def matmul_roof(m: dict) -> list[str]:
    out = [f"### bf16 matmul at the lab's shapes vs the roof ({m['device']})", "",
           f"`bench/bench_matmul_roof.py`: CUDA events, median of 5 blocks, random data. The "
           f"roof is this GPU's own 8192^3 product in this run ({m['roof_tflops']} TFLOP/s); "
           f"the reference is {m['peak_reference']:.0f} TFLOP/s, the dense bf16 figure the "
           "course quotes for H100/H200 (not measured here).", ""]
    rows = [[r["shape"], f"{r['M']} x {r['K']} x {r['N']}", r["tflops"],
             f"{r['tflops'] / m['roof_tflops']:.2%}", f"{r['tflops'] / m['peak_reference']:.2%}"]
            for r in m["rows"]]
    return out + _table(["product", "M x K x N", "TFLOP/s", "of the roof", "of 790"], rows)


def _rates(m: dict, side: str) -> str:
    return ", ".join(f"{r['img_per_s']}" for r in (m.get("runs") or {}).get(side, [])) or "-"


def hvd_upstream(m: dict) -> list[str]:
    return [f"### Lab 03 vs Horovod's own example ({m['device']})", "",
            f"`bench/bench_hvd_upstream.py`, {' '.join(m['args'])}: lab 03 "
            f"{m['lab_img_per_s']:.1f} img/s, Horovod's example {m['upstream_img_per_s']:.1f} "
            f"img/s (medians), ratio {m['ratio']} (goal >= {m['goal']}). The runs, alternating: "
            f"lab 03 {_rates(m, 'lab')}; the example {_rates(m, 'upstream')} img/s. "
            f"Reference, not measured here: "
            f"seed 001, 1 x V100, ResNet-50 batch 64: {m['seed_v100_img_per_s']} img/s."]


def render_measurements(ms: list[dict]) -> str:
    lines = ["## Measurements", ""]
    tta = [m for m in ms if m.get("bench") == "time_to_accuracy"]
    if tta:
        lines += time_to_accuracy(tta) + [""]
    for m in ms:
        kind = m.get("bench")
        if kind in RENDER:
            lines += RENDER[kind](m) + [""]
    return "\n".join(lines)


def ladder(m: dict) -> list[str]:
    """The fast path one knob at a time (bench_time_to_accuracy.py --ladder), as notebook 01
    prints it from this record (dltutor.single.ladder)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dltutor.single.ladder import ladder_rows, repeats
    out = [f"### Notebook 01's fast path, one knob at a time ({m['device']})", "",
           f"`bench/bench_time_to_accuracy.py --ladder`: real {m['data']} ({m['train_images']:,} / "
           f"{m['test_images']:,} images), ResNet width {m['width']}, torch {m['torch']}. Each rung "
           f"adds one knob to the rung above and trains from the same first weights until "
           f"{m['target']:.0%} test accuracy; the clock counts training steps only (warm-up steps, "
           "compiling included, and evaluations apart); a rung stops after "
           f"{m['cap_s']:.0f} s of training at most.", ""]
    rows = ladder_rows(m)
    out += _table(list(rows[0]), [list(r.values()) for r in rows])
    rep = repeats(m)
    out += ["", f"The last rung with {len(rep)} seeds: " + ", ".join(
        f"seed {r['seed']} {r['seconds_to_target']} s" if r["reached"] else
        f"seed {r['seed']} not reached ({r['final_acc']})" for r in rep) + "."]
    return out


RENDER = {"zero_gpu": zero_gpu, "matmul_roof": matmul_roof, "hvd_upstream": hvd_upstream,
          "time_to_accuracy_ladder": ladder}
