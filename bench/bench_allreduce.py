"""Our point-to-point ring all-reduce vs the library's dist.all_reduce, and the α-β model's accuracy.

    .venv/bin/python bench/bench_allreduce.py                      # 2, 3, 4 ranks, 1 KiB .. 64 MiB
    .venv/bin/python bench/bench_allreduce.py --nprocs 2 --iters 20

For each rank count the lab course/labs/05_allreduce/allreduce_bench.py runs once (dltutor.launch.run,
one thread per rank); it times `ring` and `gloo` (dist.all_reduce; nccl on GPUs) back to back at
every size, so load on a shared machine hits both alike. Figures:
  * busbw(ring) / busbw(gloo) at the largest size (64 MiB): goal >= 0.7;
  * α, β fitted to the ring's times at all sizes so that the largest relative error is smallest
    (a minimax fit; the least-squares fit's largest error is printed beside it), and that
    largest |model - measured| / measured over the sizes: goal <= 25%;
  * the same error when α, β come from the ping-pong instead (a prediction, not a fit).
Ranks beyond the core count share cores: those rows are labelled 'oversubscribed'.
"""
import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dltutor.allreduce import cost as cm  # noqa: E402
from dltutor.core.units import fmt_bytes, parse_bytes  # noqa: E402
from dltutor.allreduce.collectives import measure_allreduce  # noqa: E402
from dltutor.core.env import cpu_cores  # noqa: E402

SIZES = "1KiB,4KiB,16KiB,64KiB,256KiB,1MiB,4MiB,16MiB,64MiB"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--nprocs", default="2,3,4", help="rank counts to run")
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--passes", type=int, default=7, help="sweeps per run; each size keeps its fastest")
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args(argv)
    sizes = a.sizes.split(",")
    big = parse_bytes(sizes[-1])
    rows = []
    for n in [int(x) for x in a.nprocs.split(",")]:
        s = measure_allreduce(n, sizes=sizes, algorithms=["ring", "gloo"], iters=a.iters,
                              warmup=a.warmup, mode="both", dtype=a.dtype, echo=False,
                              passes=a.passes, oversubscribe=n > cpu_cores())  # labelled below
        res = {(r["algorithm"], r["bytes"]): r for r in s["results"]}
        ratio = res[("ring", big)]["busbw_GBps"] / res[("gloo", big)]["busbw_GBps"]
        fits = cm.compare_fits(s)
        alpha, beta, err = fits["ring, minimax"]
        pa, pb, perr = fits["ping-pong, lsq"]
        rows.append(dict(n=n, hw=s["hardware"], ok=all(s["checks"].values()),
                         ring=res[("ring", big)]["busbw_GBps"], gloo=res[("gloo", big)]["busbw_GBps"],
                         ratio=ratio, alpha=alpha, beta=beta, maxerr=err.max(),
                         mederr=statistics.median(err), lsqerr=fits["ring, lsq"][2].max(),
                         pp_alpha=pa, pp_beta=pb, pp_err=perr.max(),
                         note="oversubscribed" if n > cpu_cores() else ""))
        d, t = cm.times_of(s, "ring")
        print(f"N={n}: per-size ring time / fitted model:", ", ".join(
            f"{fmt_bytes(x)} {y * 1e6:.0f}us/{m * 1e6:.0f}us" for x, y, m in
            zip(d, t, cm.model_time("ring", n, d, alpha, beta))), flush=True)
    print(f"\nall-reduce at {fmt_bytes(big)}, {a.dtype}, {rows[0]['hw']}, {cpu_cores()} cores")
    print(f"{'N':>2} {'ring busbw':>11} {'gloo busbw':>11} {'ring/gloo':>9}  {'fit α us':>8} "
          f"{'1/β GB/s':>8} {'max err':>8} {'median':>7} {'lsq max':>8}  "
          f"{'ping-pong α,1/β -> max err':>27}")
    for r in rows:
        print(f"{r['n']:>2} {r['ring']:11.3f} {r['gloo']:11.3f} {r['ratio']:9.2f}  {r['alpha'] * 1e6:8.1f} "
              f"{1 / r['beta'] / 1e9 if r['beta'] else float('inf'):8.2f} {r['maxerr']:8.0%} "
              f"{r['mederr']:7.0%} {r['lsqerr']:8.0%}  {r['pp_alpha'] * 1e6:9.1f} us {1 / r['pp_beta'] / 1e9 if r['pp_beta'] else float('inf'):5.2f} GB/s "
              f"{r['pp_err']:6.0%}  {r['note']}{'' if r['ok'] else ' RESULTS DIFFER'}")
    print("goals: ring/gloo >= 0.70 at the largest size; fitted model within 25% at every size")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
