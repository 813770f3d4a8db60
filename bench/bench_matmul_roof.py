"""How far a small model's matrix products are from the device's roof: bf16 matmul TFLOP/s at the
shapes of lab 04's BERT layers, beside the same device at 8192^3 and the datasheet-class figure.

    python3 bench/bench_matmul_roof.py                 # on a GPU (a CPU run says it is one)
    python3 bench/bench_matmul_roof.py --json out.json --peak 790

The shapes come from lab 04's own flags (dltutor.zero.bert_lab): the default run (the seed's
BERT layer, h=1024, ff=4096, seq 128, batch 1) and the --tiny run, each as the token matrix
(batch*seq x h) times the layer's weights: the attention projection (h x 3h), the output
projection (h x h), the feed-forward up (h x ff) and down (ff x h) products. 8192^3 is the
large square product that fills the chip, the device's own roof in this run. --peak is the
reference the fractions are also given against: 790 TFLOP/s dense bf16 is the figure the course
quotes for H100/H200 at 8192^3 (issue #24; this workplace's H100 measured 798 on random data).
Timing: CUDA events around `--reps` products after `--warmup` untimed ones, inputs rotated over
several buffers (no cache reuse), random normal data (never zeros); the median of 5 such blocks.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # a checkout, not installed

import torch  # noqa: E402

from bench_result import emit  # noqa: E402

from dltutor.zero.bert_lab import TINY, parser as lab_parser  # noqa: E402

PEAK_REFERENCE = 790.0   # TFLOP/s, dense bf16, H100/H200 at 8192^3 (the course's reference figure)


def lab_shapes() -> list[tuple[str, int, int, int]]:
    """(name, M, K, N) of lab 04's layer products at its default and --tiny sizes."""
    default = lab_parser("shapes").parse_args([])
    rows = []
    for tag, f in (("lab 04 default", vars(default)), ("lab 04 --tiny", {**vars(default), **TINY})):
        t, h, ff = f["batch_size"] * f["seq_len"], f["h_dim"], f["ff_dim"]
        rows += [(f"{tag}: QKV projection", t, h, 3 * h), (f"{tag}: attention output", t, h, h),
                 (f"{tag}: feed-forward up", t, h, ff), (f"{tag}: feed-forward down", t, ff, h)]
    return rows


def tflops(m: int, k: int, n: int, dev, dtype=torch.bfloat16, reps: int = 50, warmup: int = 10,
           buffers: int = 4) -> float:
    """Median TFLOP/s of (m x k) @ (k x n) on `dev`, timed with CUDA events (host clock on CPU)."""
    import time
    gen = torch.Generator(device=dev).manual_seed(0)
    a = [torch.randn(m, k, device=dev, dtype=dtype, generator=gen) for _ in range(buffers)]
    b = [torch.randn(k, n, device=dev, dtype=dtype, generator=gen) for _ in range(buffers)]
    out = torch.empty(m, n, device=dev, dtype=dtype)
    for i in range(warmup):
        torch.matmul(a[i % buffers], b[i % buffers], out=out)
    rates = []
    for _ in range(5):
        if dev.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(reps):
                torch.matmul(a[i % buffers], b[i % buffers], out=out)
            stop.record()
            stop.synchronize()
            seconds = start.elapsed_time(stop) / 1e3
        else:
            t0 = time.perf_counter()
            for i in range(reps):
                torch.matmul(a[i % buffers], b[i % buffers], out=out)
            seconds = time.perf_counter() - t0
        rates.append(2 * m * k * n * reps / seconds / 1e12)
    if not torch.isfinite(out.float()).all():
        raise RuntimeError(f"matmul {m}x{k}x{n} produced non-finite values")
    return statistics.median(rates)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--peak", type=float, default=PEAK_REFERENCE, help="reference TFLOP/s")
    ap.add_argument("--reps", type=int, default=50, help="products per timed block")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (no GPU visible)"
    if dev.type == "cuda":
        shapes = [("8192^3 (the device's roof)", 8192, 8192, 8192)] + lab_shapes()
    else:   # bf16 on a CPU is slow: a smoke run of the small shapes only, labelled as such
        shapes = [("256^3 (CPU stand-in for the roof)", 256, 256, 256)] + [
            s for s in lab_shapes() if "--tiny" in s[0]]
    rows = []
    for label, m, k, n in shapes:
        rate = tflops(m, k, n, dev, reps=args.reps if m * n >= 1 << 20 else 4 * args.reps,
                      warmup=10 if dev.type == "cuda" else 1)
        rows.append(dict(shape=label, M=m, K=k, N=n, tflops=float(f"{rate:.4g}")))
    roof = rows[0]["tflops"]
    for r in rows:
        r["of_roof"] = round(r["tflops"] / roof, 4)
        r["of_peak_reference"] = round(r["tflops"] / args.peak, 4)
    print(f"bf16 matmul on {name}; roof = {rows[0]['shape']} = {roof:.1f} TFLOP/s; "
          f"reference peak {args.peak:.0f} TFLOP/s")
    print(f"{'shape':42s} {'M x K x N':>22s} {'TFLOP/s':>9s} {'of roof':>8s} {'of ref':>7s}")
    for r in rows:
        print(f"{r['shape']:42s} {r['M']:>6d} x{r['K']:>6d} x{r['N']:>6d} {r['tflops']:9.2f} "
              f"{r['of_roof']:8.1%} {r['of_peak_reference']:7.1%}")
    out = dict(bench="matmul_roof", device=name, dtype="bf16", peak_reference=args.peak,
               roof_tflops=roof, rows=rows)
    emit(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
