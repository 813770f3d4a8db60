"""Lab 05b: a parameter server beside ring all-reduce — one synchronous SGD step, checked and timed.

Rank 0 is the server; ranks 1..W are the workers. For each W in --workers:
  * check: both forms update the same starting parameters with the same gradients (float64); the
    parameters must agree (`dltutor.allreduce.param_server.check_step`);
  * time: seconds per step of each form for a float32 gradient of --numel elements (the fastest
    of --passes sweeps; communication and update only, no forward/backward).
A ping-pong between ranks 0 and 1 fits α and β for the cost model. Rank 0 prints a table and one
`DLTUTOR_METRICS {json}` line that `dltutor.allreduce.param_server.measure` (the notebook) parses.
Ranks above W sit a measurement out. Run it on max(W)+1 ranks; on a machine with fewer cores
than ranks the processes share cores, and the times say so (the label printed first).

Launch forms (run in this lab's folder):
    python ps_bench.py --tiny                                   # 1 process: nothing to compare
    torchrun --nproc-per-node 3 ps_bench.py --tiny --workers 2  # 1 server + 2 workers
    torchrun --nproc-per-node 5 ps_bench.py --workers 2,3,4     # 1 server + up to 4 workers
    srun --ntasks 9 python ps_bench.py --workers 2,4,8          # Slurm: one task per rank
From a notebook: dltutor.allreduce.param_server.measure(workers=[2, 3, 4], numel=...).
"""
from __future__ import annotations

import sys

import torch

from dltutor.allreduce import collectives as C
from dltutor.allreduce import cost
from dltutor.allreduce import param_server as PS
from dltutor.allreduce.sweep import over_passes
from dltutor.core import dist as ddist
from dltutor.core import flags
from dltutor.core.device import hardware_label
from dltutor.core.env import cpu_cores
from dltutor.core.units import fmt_bytes

PINGPONG_SIZES = (1024, 64 << 10, 1 << 20)


def int_list(text) -> list[int]:
    return [flags.positive_int(x) for x in str(text).split(",") if x.strip()]


def parse_args(argv=None):
    ap = flags.parser(__doc__)
    ap.add_argument("--workers", type=int_list, default="2,3,4",
                    help="comma-separated worker counts W (each needs W+1 ranks)")
    ap.add_argument("--numel", type=flags.positive_int, default=11_173_962,
                    help="gradient elements (default: the course's CIFAR ResNet-18, 11.2 M)")
    ap.add_argument("--iters", type=flags.positive_int, default=10,
                    help="at least this many steps per timing")
    ap.add_argument("--warmup", type=flags.nonnegative_int, default=2, help="untimed steps per timing")
    ap.add_argument("--passes", type=flags.positive_int, default=3,
                    help="sweeps over (form, W); each keeps its fastest, the range is its spread")
    ap.add_argument("--check-numel", type=flags.positive_int, default=7, help="length of the check")
    flags.add_tiny(ap, {"numel": 101_770, "iters": 3, "warmup": 1, "passes": 2})
    return flags.parse(ap, argv)


def main(argv=None) -> int:
    a = parse_args(argv)
    with ddist.session() as ctx:  # DDP: torchrun / srun variables -> process group
        n, rank = ctx.world_size, ctx.rank
        say = print if rank == 0 else (lambda *x, **k: None)
        workers = [w for w in a.workers if w + 1 <= n]
        label = f"{hardware_label()}, {n} process{'es' if n > 1 else ''} on {cpu_cores()} cores" + (
            " (they share cores)" if n > cpu_cores() else "")
        say(f"# parameter server vs ring: 1 server + W workers, W in {workers}, {label}")
        if not workers:
            say("nothing to compare: launch with at least 3 ranks (torchrun --nproc-per-node 3)")
            if rank == 0:
                ddist.report(hardware=label, cores=cpu_cores(), numel=a.numel, checks={}, results=[])
            return 0
        groups = PS.groups(workers)  # DDP: every rank creates every group
        checks, params = {}, {}
        for w in workers:
            got = PS.check_step(w, a.check_numel, groups[w])
            ok = got["ps_agree"] and got["ring_agree"] and torch.allclose(
                torch.tensor(got["ps"]), torch.tensor(got["ring"]), rtol=1e-12, atol=1e-12)
            checks[w], params[w] = bool(ok), got
            say(f"check W={w}: parameter server == ring all-reduce: {'OK' if ok else 'MISMATCH'}")
        spans = over_passes([(f, w) for w in workers for f in PS.FORMS],
                            lambda k: PS.step_time(k[0], k[1], a.numel, groups[k[1]], a.iters, a.warmup),
                            a.passes)
        pp = over_passes(PINGPONG_SIZES, lambda d: C.pingpong(d, a.iters, a.warmup), a.passes)
        results = [{"form": f, "workers": w, "time_s": spans[(f, w)][0], "time_range_s": list(spans[(f, w)]),
                    "times_s": spans[(f, w)].times}
                   for w in workers for f in PS.FORMS]
        if rank == 0:
            alpha, beta = cost.fit_alpha_beta(list(PINGPONG_SIZES), [pp[d][0] for d in PINGPONG_SIZES])
            say(f"\ngradient {a.numel:,} float32 = {fmt_bytes(4 * a.numel)}; "
                f"ping-pong fit alpha = {alpha * 1e6:.1f} us, beta = {beta * 1e9:.3f} ns/byte")
            say(f"{'W':>3} {'form':<6} {'fastest ms':>10} {'slowest ms':>10}")
            for r in results:
                lo, hi = r["time_range_s"]
                say(f"{r['workers']:>3} {r['form']:<6} {lo * 1e3:10.2f} {hi * 1e3:10.2f}")
            ddist.report(hardware=label, cores=cpu_cores(), numel=a.numel, checks=checks, check_params=params,
                         results=results, alpha_s=alpha, beta_s_per_byte=beta, lr=PS.LR,
                         pingpong=[{"bytes": d, "time_s": pp[d][0], "times_s": pp[d].times} for d in PINGPONG_SIZES])
    failed = [w for w, ok in checks.items() if not ok]
    if failed:
        print(f"rank {rank}: parameter server and ring differ for W in {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
