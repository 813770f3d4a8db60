"""Collectives built from point-to-point messages, so a student can see what all_reduce does.

Inside a launched task (a process group is initialised, see `dltutor.core.dist`):
- `ring_allreduce(t)`            reduce-scatter then all-gather around the ring (what NCCL/Gloo do),
                                 each phase a `ring_phase(t, phase, group)`
- `reduce_bcast_allreduce(t)`    every rank sends to rank 0, which sums and sends back (a
                                 parameter server): simple, but rank 0's link carries 2(N-1)·D
- `recursive_doubling_allreduce(t)` log2 N rounds of pairwise exchange; non-power-of-two N folds
                                 the extra ranks into partners first (MPICH's scheme)
- `check_against_all_reduce`, `time_allreduce`, `pingpong` to verify and measure them.
All sum in place, like `dist.all_reduce(t)` with the default op. Every tensor they hand to
torch.distributed is on the rank's device (`dltutor.core.device.device()`: cuda:<local_rank> under
NCCL, which moves nothing else), and paired sends and receives go through `exchange` (one
`batch_isend_irecv` under NCCL). tests/test_gpu_dryrun.py checks this on the CPU.

The step model is `dltutor.allreduce.ring`, the α-β cost models and busbw `dltutor.allreduce.cost`.
From a notebook (never inside a process group): `measure_allreduce(nproc, ...)` runs the lab.
"""
from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from dltutor.allreduce.ring import chunk_bounds, sent_chunk
from dltutor.core.device import device as rank_device
from dltutor.core.device import synchronize
from dltutor.core.units import MiB


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    if not tensor.is_contiguous():
        raise ValueError("all-reduce needs a contiguous tensor (call .contiguous() first)")
    return tensor.view(-1)


SEGMENT_BYTES = MiB
_SCRATCH: dict = {}
BATCH_P2P: bool | None = None
"""Post paired sends/receives as one `dist.batch_isend_irecv`? None: under NCCL only (`exchange`)."""


def exchange(sends, recvs, group=None, on_recv=None) -> None:
    """Send [(tensor, peer)] and receive [(tensor, peer)] at once; return when all are done.

    `on_recv(i)` runs once receive i has arrived, in order. Under NCCL the messages go as one
    batch, `dist.batch_isend_irecv` (one NCCL group call): posted one by one, a rank's send and
    receive with the same peer queue in order, and two ranks that both send a large message first
    wait for each other's receive for ever. Gloo has no batches (batch_isend_irecv just posts each
    op in turn), so there they are posted one by one with dist.isend / dist.irecv, and `on_recv(i)`
    overlaps the arrival of the receives after i.
    """
    batch = BATCH_P2P if BATCH_P2P is not None else dist.get_backend(group) == "nccl"
    if batch:
        ops = [dist.P2POp(dist.isend, t, p, group) for t, p in sends] + \
              [dist.P2POp(dist.irecv, t, p, group) for t, p in recvs]
        for q in dist.batch_isend_irecv(ops) if ops else []:
            q.wait()
        for i in range(len(recvs) if on_recv else 0):
            on_recv(i)
        return
    send_reqs = [dist.isend(t, p, group=group) for t, p in sends]
    for i, q in enumerate([dist.irecv(t, p, group=group) for t, p in recvs]):
        q.wait()
        if on_recv:
            on_recv(i)
    for q in send_reqs:
        q.wait()


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

    Steps s = 1 .. N-1 as on the seed's slides (`ring.sent_chunk`): in reduce-scatter step s send
    chunk (r - s + 1) to the right, receive chunk (r - s) from the left and add it; in all-gather
    step s send chunk (r - s + 2), receive chunk (r - s + 1) in place.
    Each rank sends 2(N-1) chunks of about D/N bytes (see `dltutor.allreduce.ring`); a chunk longer
    than `segment_bytes` goes as several messages, so the adding overlaps the receiving.
    """
    for phase in ("reduce-scatter", "all-gather"):
        ring_phase(tensor, phase, group, segment_bytes)
    return tensor


def ring_phase(tensor: torch.Tensor, phase: str, group=None,
               segment_bytes: int = SEGMENT_BYTES) -> torch.Tensor:
    """One phase of the ring on `group`, in place: 'reduce-scatter' (N-1 steps that add; rank r
    then owns the complete chunk (r + 1) mod N, `ring.owner_after_reduce_scatter`) or 'all-gather'
    (N-1 steps that copy each rank's complete chunk to all). Chunks follow `ring.chunk_bounds`."""
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
    add = phase == "reduce-scatter"

    def segments(a, b):  # long chunks travel in pieces: adding piece k overlaps receiving k+1
        return [(i, min(i + seg, b)) for i in range(a, b, seg)]

    for s in range(1, n):  # what the left neighbour sends, arrives here
        (s0, s1), (r0, r1) = bounds[sent_chunk(r, s, n, phase)], bounds[sent_chunk(r - 1, s, n, phase)]
        pieces = segments(r0, r1)  # empty chunks (length < N): no message at all

        def add_piece(i, pieces=pieces, r0=r0):
            a, b = pieces[i]
            flat[a:b] += buf[a - r0:b - r0]
        exchange([(flat[a:b], right) for a, b in segments(s0, s1)],
                 [(buf[a - r0:b - r0] if add else flat[a:b], left) for a, b in pieces],
                 group, on_recv=add_piece if add else None)
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
        exchange([], list(zip(bufs, others)),  # sum in rank order as messages arrive
                 on_recv=lambda i: flat.add_(bufs[i]))
        exchange([(flat, p) for p in others], [])
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
        exchange([(flat, partner)], [(buf, partner)])  # a pair with one peer: one batch on NCCL
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


def random_tensor(numel: int, dtype: torch.dtype, seed: int, device=None) -> torch.Tensor:
    """`numel` random values from `seed` (the same on every device), on `device` (default: the
    rank's device, where the collectives need them)."""
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(numel, generator=g, dtype=torch.float64).to(dtype)
    else:
        x = torch.randint(-1000, 1000, (numel,), generator=g, dtype=dtype)
    return x.to(rank_device() if device is None else device)


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
    synchronize(x.device)  # a GPU's queued work is finished before the clock starts ...
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x)
    synchronize(x.device)  # ... and the timed calls have run, not just been queued
    dt = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=x.device)  # NCCL: GPU
    dist.all_reduce(dt, op=dist.ReduceOp.MAX)  # the loop ends when the slowest rank's does
    return dt.item()


def time_allreduce(fn, nbytes: int, dtype=torch.float32, iters: int = 10, warmup: int = 2,
                   min_seconds: float = 0.05) -> float:
    """Seconds per all-reduce of `nbytes` on the slowest rank.

    After a barrier, calls run back to back (as nccl-tests does); the elapsed time of the slowest
    rank divided by the number of calls is the time of one all-reduce: it is done when the last
    rank is. nccl-tests and the OSU benchmarks report the average over ranks by default instead
    (nccl-tests `-a 1`; `-a 3` is the slowest rank; OSU prints "Avg Latency", min and max with
    `-f`), and OSU puts a barrier between calls. (A barrier before every call would add the
    barrier's own exit skew, a few hundred microseconds on CPUs, to every call.) The timed loop
    has at least `iters` calls and, like `timeit`'s autorange, enough of them to last
    `min_seconds`, judged from the `warmup` calls, so a short hiccup of the machine cannot
    dominate a tiny message's time.
    """
    numel = max(1, nbytes // torch.empty((), dtype=dtype).element_size())
    x = torch.ones(numel, dtype=dtype, device=rank_device())
    guess = _timed_loop(fn, x, max(1, warmup)) / max(1, warmup)  # same on every rank (MAX)
    calls = max(iters, min(10_000, math.ceil(min_seconds / max(guess, 1e-9))))
    return _timed_loop(fn, x, calls) / calls


def pingpong(nbytes: int, iters: int = 10, warmup: int = 2, peer: int = 1) -> float | None:
    """Median one-way time (s) of a `nbytes` message between rank 0 and `peer` (None elsewhere)."""
    r = dist.get_rank()
    x = torch.zeros(max(1, nbytes), dtype=torch.uint8, device=rank_device())
    times = []
    for i in range(warmup + iters):
        if r == 0:
            synchronize(x.device)
            t0 = time.perf_counter()
            dist.send(x, peer)
            dist.recv(x, peer)
            synchronize(x.device)  # NCCL's send/recv return once queued: wait for the bytes
            if i >= warmup:
                times.append((time.perf_counter() - t0) / 2)
        elif r == peer:
            dist.recv(x, 0)
            dist.send(x, 0)
    return sorted(times)[len(times) // 2] if times else None


def measure_allreduce(nproc: int = 2, sizes=("1KiB", "1MiB"), algorithms=None, iters: int = 5,
                      warmup: int = 1, mode: str = "both", dtype: str = "float32",
                      timeout: float = 600.0, echo: bool = True, passes: int = 1,
                      oversubscribe: bool = False, env=None) -> dict:
    """From a notebook: run the lab on `nproc` local ranks (`dltutor.launch.run`), return its summary.

    Keys of the summary (rank 0's DLTUTOR_METRICS line): world_size, hardware, dtype, checks
    (algorithm -> matched dist.all_reduce), results (one dict per size x algorithm: algorithm,
    bytes, time_s (the fastest of `passes` sweeps), time_range_s, times_s (every pass),
    algbw_GBps, busbw_GBps, ok),
    pingpong (bytes, time_s), alpha_s, beta_s_per_byte. `oversubscribe=True` allows more ranks
    than cores (the ranks then share cores: say so wherever the numbers are shown). `env` adds
    variables for the ranks (dltutor.core.device.RankPlan.env: the CPU on a node with too few GPUs).
    """
    from dltutor.allreduce.sweep import run_lab
    args = ["--sizes", ",".join(str(s).replace(" ", "") for s in sizes), "--iters", str(iters),
            "--warmup", str(warmup), "--mode", mode, "--dtype", dtype, "--passes", str(passes)]
    if algorithms:
        args += ["--algorithms", ",".join(algorithms)]
    return run_lab("allreduce_bench.py", nproc, args, timeout=timeout, echo=echo,
                   oversubscribe=oversubscribe, env=env)[0]
