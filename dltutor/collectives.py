"""Collectives built from point-to-point messages, so a student can see what all_reduce does.

Inside a launched task (a process group is initialised, see `dltutor.dist`):
- `ring_allreduce(t)`            reduce-scatter then all-gather around the ring (what NCCL/Gloo do)
- `reduce_bcast_allreduce(t)`    every rank sends to rank 0, which sums and sends back (a
                                 parameter server): simple, but rank 0's link carries 2(N-1)·D
- `recursive_doubling_allreduce(t)` log2 N rounds of pairwise exchange; non-power-of-two N folds
                                 the extra ranks into partners first (MPICH's scheme)
- `check_against_all_reduce`, `time_allreduce`, `pingpong` to verify and measure them.
All sum in place, like `dist.all_reduce(t)` with the default op.

The step model (`ring_steps`, ...) and the α-β cost models (`model_time`, `fit_alpha_beta`,
`busbw`, ...) are re-exported from `dltutor.ringmodel` and `dltutor.costmodel`.
From a notebook (never inside a process group): `measure_allreduce(nproc, ...)` runs the lab.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import torch
import torch.distributed as dist

from dltutor.costmodel import (ALGORITHMS, algbw, busbw, coefficients, crossover_bytes,  # noqa: F401
                               fit_alpha_beta, fmt_bytes, model_time, parse_size,
                               relative_errors, ring_time)
from dltutor.ringmodel import (chunk_bounds, chunk_letter, label,  # noqa: F401
                               owner_after_reduce_scatter, ring_final_ok, ring_steps)

LAB = Path(__file__).resolve().parent.parent / "course" / "labs" / "05_allreduce" / "allreduce_bench.py"


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_contiguous():
        raise ValueError("all-reduce needs a contiguous tensor (call .contiguous() first)")
    return tensor.view(-1)


SEGMENT_BYTES = 1 << 20
_SCRATCH: dict = {}


def scratch(numel: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A receive buffer of `numel` elements kept between calls, as NCCL and Gloo keep theirs:
    allocating (and first touching) tens of MiB on every all-reduce costs as much as sending them."""
    key = (dtype, torch.device(device))
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < numel:
        buf = _SCRATCH[key] = torch.empty(numel, dtype=dtype, device=device)
    return buf[:numel]


def ring_allreduce(tensor: torch.Tensor, group=None, segment_bytes: int = SEGMENT_BYTES) -> torch.Tensor:
    """Sum `tensor` over all ranks in place with a ring of isend/irecv; returns `tensor`.

    Step s of reduce-scatter: send chunk (r - s) to the right, receive chunk (r - s - 1) from the
    left and add it. Step s of all-gather: send chunk (r + 1 - s), receive chunk (r - s) in place.
    Each rank sends 2(N-1) chunks of about D/N bytes (see `dltutor.ringmodel`); a chunk longer
    than `segment_bytes` goes as several messages, so the adding overlaps the receiving.
    """
    n, r = dist.get_world_size(group), dist.get_rank(group)
    if n == 1:
        return tensor
    flat = _flat(tensor)
    bounds = chunk_bounds(flat.numel(), n)
    right, left = (r + 1) % n, (r - 1) % n
    if group is not None:  # isend/irecv take global ranks
        right, left = dist.get_global_rank(group, right), dist.get_global_rank(group, left)
    buf = scratch(bounds[0][1] - bounds[0][0], flat.dtype, flat.device)  # chunk 0 is the longest
    seg = max(1, segment_bytes // flat.element_size())

    def segments(a, b):  # long chunks travel in pieces: adding piece k overlaps receiving k+1
        return [(i, min(i + seg, b)) for i in range(a, b, seg)]

    def step(send_c, recv_c, add):
        (s0, s1), (r0, r1) = bounds[send_c], bounds[recv_c]
        sends = [dist.isend(flat[a:b], right, group=group) for a, b in segments(s0, s1)]
        recvs = [(dist.irecv(buf[a - r0:b - r0] if add else flat[a:b], left, group=group), a, b)
                 for a, b in segments(r0, r1)]  # empty chunks (length < N): no message at all
        for q, a, b in recvs:
            q.wait()
            if add:
                flat[a:b] += buf[a - r0:b - r0]
        for q in sends:
            q.wait()

    for s in range(n - 1):  # reduce-scatter
        step((r - s) % n, (r - s - 1) % n, add=True)
    for s in range(n - 1):  # all-gather
        step((r + 1 - s) % n, (r - s) % n, add=False)
    return tensor


def reduce_bcast_allreduce(tensor: torch.Tensor, root: int = 0) -> torch.Tensor:
    """Reduce to `root` then broadcast from it, with point-to-point messages (a parameter server)."""
    n, r = dist.get_world_size(), dist.get_rank()
    if n == 1:
        return tensor
    flat = _flat(tensor)
    if r == root:
        others = [p for p in range(n) if p != root]
        bufs = scratch(flat.numel() * len(others), flat.dtype, flat.device).view(len(others), flat.numel())
        reqs = [dist.irecv(b, p) for b, p in zip(bufs, others)]
        for q, b in zip(reqs, bufs):  # sum in rank order as messages arrive
            q.wait()
            flat += b
        for q in [dist.isend(flat, p) for p in others]:
            q.wait()
    else:
        dist.send(flat, root)
        dist.recv(flat, root)
    return tensor


def recursive_doubling_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    """log2 N rounds: in round k rank r swaps its whole vector with rank r XOR 2^k and adds.

    For N not a power of two, let p be the largest power of two <= N and e = N - p. Among the
    first 2e ranks each even rank first hands its vector to the odd rank above it and waits; the
    p remaining ranks run recursive doubling; then each odd rank sends the result back down.
    """
    n, r = dist.get_world_size(), dist.get_rank()
    if n == 1:
        return tensor
    flat = _flat(tensor)
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    buf = scratch(flat.numel(), flat.dtype, flat.device)
    if r < 2 * extra:  # fold: even ranks sit the doubling out
        if r % 2 == 0:
            dist.send(flat, r + 1)
            dist.recv(flat, r + 1)
            return tensor
        dist.recv(buf, r - 1)
        flat += buf
        vr = r // 2
    else:
        vr = r - extra
    to_real = (lambda v: 2 * v + 1 if v < extra else v + extra)
    mask = 1
    while mask < p:
        partner = to_real(vr ^ mask)
        reqs = [dist.isend(flat, partner), dist.irecv(buf, partner)]
        for q in reqs:
            q.wait()
        flat += buf  # a + b == b + a in floating point too: both partners get the same bits
        mask <<= 1
    if r < 2 * extra:
        dist.send(flat, r - 1)
    return tensor


ALLREDUCE = {
    "ring": ring_allreduce,
    "reduce_bcast": reduce_bcast_allreduce,
    "recursive_doubling": recursive_doubling_allreduce,
    "gloo": lambda t: (dist.all_reduce(t), t)[1],
}
"""Name -> in-place all-reduce. 'gloo' is the library's own dist.all_reduce (nccl on GPUs)."""


def random_tensor(numel: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-1000, 1000, (numel,), generator=g, dtype=dtype)


def check_against_all_reduce(fn, numel: int, dtype: torch.dtype, seed: int = 0) -> tuple[bool, str]:
    """Run `fn` and dist.all_reduce on the same random data; (ok, message) on every rank."""
    r = dist.get_rank()
    x = random_tensor(numel, dtype, seed * 1000 + r)
    ref = x.clone()
    dist.all_reduce(ref)
    out = fn(x.clone())
    if dtype.is_floating_point:
        tol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 1e-2)
        ok = torch.allclose(out, ref, rtol=tol, atol=tol * dist.get_world_size())
    else:
        ok = torch.equal(out, ref)
    err = (out.double() - ref.double()).abs().max().item() if numel else 0.0
    return bool(ok), f"numel={numel} dtype={str(dtype).replace('torch.', '')} max|err|={err:.3g}"


def _timed_loop(fn, x, calls: int) -> float:
    """Seconds for `calls` back-to-back calls after a barrier, on the slowest rank."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the loop ends when the slowest rank's does
    return dt.item()


def time_allreduce(fn, nbytes: int, dtype=torch.float32, iters: int = 10, warmup: int = 2,
                   min_seconds: float = 0.05) -> float:
    """Seconds per all-reduce of `nbytes`, timed as nccl-tests and the OSU benchmarks do.

    After a barrier, calls run back to back; the elapsed time of the slowest rank divided by the
    number of calls is the time of one all-reduce. (A barrier before every call would add the
    barrier's own exit skew, a few hundred microseconds on CPUs, to every call.) The timed loop
    has at least `iters` calls and, like `timeit`'s autorange, enough of them to last
    `min_seconds`, judged from the `warmup` calls, so a short hiccup of the machine cannot
    dominate a tiny message's time.
    """
    numel = max(1, nbytes // torch.empty((), dtype=dtype).element_size())
    x = torch.ones(numel, dtype=dtype, device=_device())
    guess = _timed_loop(fn, x, max(1, warmup)) / max(1, warmup)  # same on every rank (MAX)
    calls = max(iters, min(10_000, math.ceil(min_seconds / max(guess, 1e-9))))
    return _timed_loop(fn, x, calls) / calls


def pingpong(nbytes: int, iters: int = 10, warmup: int = 2, peer: int = 1) -> float | None:
    """Median one-way time (s) of a `nbytes` message between rank 0 and `peer` (None elsewhere)."""
    r = dist.get_rank()
    x = torch.zeros(max(1, nbytes), dtype=torch.uint8, device=_device())
    times = []
    for i in range(warmup + iters):
        if r == 0:
            t0 = time.perf_counter()
            dist.send(x, peer)
            dist.recv(x, peer)
            if i >= warmup:
                times.append((time.perf_counter() - t0) / 2)
        elif r == peer:
            dist.recv(x, 0)
            dist.send(x, 0)
    return sorted(times)[len(times) // 2] if times else None


def _device():
    from dltutor.env import device
    return device()


def measure_allreduce(nproc: int = 2, sizes=("1KiB", "1MiB"), algorithms=None, iters: int = 5,
                      warmup: int = 1, mode: str = "both", dtype: str = "float32",
                      timeout: float = 600.0, echo: bool = True, passes: int = 1) -> dict:
    """From a notebook: run the lab on `nproc` local ranks (`dltutor.launch`), return its summary.

    Keys of the summary (rank 0's DLTUTOR_METRICS line): world_size, hardware, dtype, checks
    (algorithm -> matched dist.all_reduce), results (one dict per size x algorithm: algorithm,
    bytes, time_s (the fastest of `passes` sweeps), time_range_s, algbw_GBps, busbw_GBps, ok),
    pingpong (bytes, time_s), alpha_s, beta_s_per_byte.
    """
    from dltutor.launch import launch
    args = ["--sizes", ",".join(str(s).replace(" ", "") for s in sizes), "--iters", str(iters),
            "--warmup", str(warmup), "--mode", mode, "--dtype", dtype, "--passes", str(passes)]
    if algorithms:
        args += ["--algorithms", ",".join(algorithms)]
    res = launch(str(LAB), nproc=nproc, args=args, timeout=timeout, echo=echo)
    summary = [m for m in res.metrics if m.get("rank") == 0 and "results" in m]
    if not summary:
        raise RuntimeError(f"the lab printed no summary line on rank 0 (logs: {res.log_dir})")
    return summary[0]
