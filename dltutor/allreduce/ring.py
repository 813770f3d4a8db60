"""The step model of ring all-reduce: who holds what after every step, with the seed's labels.

No torch here: this is bookkeeping a student can step through (see `dltutor.allreduce.visualizer`).

Labelling convention (TACC seed slide: P0 ... P7 each hold chunks A0 ... A7, B0 ... B7, ..., H0 ... H7)
- the LETTER is the chunk index (A = chunk 0, B = chunk 1, ...), the DIGIT is the rank whose data it
  is: before the first step rank r holds `A{r}`, `B{r}`, ..., one piece of its own vector per chunk.
- a partial sum is written in the order it was accumulated along the ring, e.g. on 8 ranks chunk G
  on rank 0 after two reduce-scatter steps holds "G6+G7+G0".
- pass `style="rank-letter"` to `label` for the transposed reading (letter = rank, digit = chunk).

Schedule (the usual one, as in Baidu's and Horovod's descriptions):
- reduce-scatter step s = 0 .. N-2: rank r sends chunk (r - s) mod N to rank r+1, which adds it to
  its own copy. After N-1 steps rank r owns the complete sum of chunk (r + 1) mod N.
- all-gather step s = 0 .. N-2: rank r sends chunk (r + 1 - s) mod N (complete) to rank r+1, which
  overwrites its copy. After N-1 more steps every rank holds every complete chunk.

Tensor lengths need not be multiples of N: chunk boundaries follow `numpy.array_split` (the first
`length % N` chunks have one extra element); with length < N some chunks are empty (0 bytes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dltutor.core.units import MiB, fmt_bytes

PHASES = ("start", "reduce-scatter", "all-gather")


def chunk_letter(chunk: int) -> str:
    """A, B, ..., Z, then AA, AB, ... (N is at most 16 in the course, so A..P)."""
    s, c = "", int(chunk)
    while True:
        s = chr(ord("A") + c % 26) + s
        c = c // 26 - 1
        if c < 0:
            return s


def chunk_bounds(length: int, n: int) -> list[tuple[int, int]]:
    """(start, stop) of each of `n` chunks of a vector of `length`, as `numpy.array_split` cuts."""
    if n < 1 or length < 0:
        raise ValueError(f"need n >= 1 and length >= 0, got n={n}, length={length}")
    q, extra = divmod(int(length), int(n))
    bounds, start = [], 0
    for i in range(n):
        stop = start + q + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def owner_after_reduce_scatter(rank: int, n: int) -> int:
    """The chunk index that rank `rank` holds fully summed after the reduce-scatter phase."""
    return (rank + 1) % n


def label(chunk: int, ranks, *, style: str = "chunk-letter", max_terms: int | None = None,
          n: int | None = None) -> str:
    """The seed's label of a (partial) sum, e.g. label(6, (6, 7, 0)) == "G6+G7+G0".

    `max_terms` shortens long sums: a complete sum (len(ranks) == n) becomes "ΣG", any other sum
    with more terms becomes first+…+last, e.g. "G6+…+G1 (4)".
    """
    def term(r):
        if style == "rank-letter":
            return f"{chunk_letter(r)}{chunk}"
        return f"{chunk_letter(chunk)}{r}"
    ranks = tuple(ranks)
    if max_terms is not None and len(ranks) > max_terms:
        if n is not None and len(ranks) == n:
            return "Σ" + (chunk_letter(chunk) if style != "rank-letter" else f"·{chunk}")
        return f"{term(ranks[0])}+…+{term(ranks[-1])} ({len(ranks)})"
    return "+".join(term(r) for r in ranks)


@dataclass(frozen=True)
class Send:
    """One message on one link during one step."""
    src: int
    dst: int
    chunk: int
    nelem: int
    nbytes: int
    contrib: tuple  # ranks whose data the message carries, in accumulation order


@dataclass
class RingStep:
    """The state after `index` steps (index 0 = before any communication)."""
    index: int
    phase: str            # "start", "reduce-scatter" or "all-gather"
    phase_step: int       # 1-based step within the phase (0 at the start)
    phase_steps: int      # N - 1
    held: tuple           # held[rank][chunk] -> tuple of contributing ranks, accumulation order
    sends: tuple = field(default_factory=tuple)  # the messages of the step that led here
    bytes_step: int = 0   # bytes on all links during this step
    bytes_total: int = 0  # bytes on all links since the start
    bytes_per_rank: int = 0  # bytes one rank (the busiest) has sent since the start
    step_time: float = 0.0   # modelled: alpha + beta * largest message of this step
    elapsed: float = 0.0     # modelled time since the start

    @property
    def n(self) -> int:
        return len(self.held)

    @property
    def phase_text(self) -> str:
        if self.phase == "start":
            return f"start: each rank holds only its own data (N = {self.n})"
        return f"{self.phase} step {self.phase_step} of {self.phase_steps}"

    def label(self, rank: int, chunk: int, **kw) -> str:
        return label(chunk, self.held[rank][chunk], n=self.n, **kw)

    def complete(self, rank: int, chunk: int) -> bool:
        return len(self.held[rank][chunk]) == self.n


def ring_steps(n: int, length: int | None = None, itemsize: int = 4, alpha: float = 0.0,
               beta: float = 0.0) -> list[RingStep]:
    """All 2(N-1)+1 states of ring all-reduce on `n` ranks for a vector of `length` elements.

    `itemsize` bytes per element; `alpha` (s per message) and `beta` (s per byte) drive the modelled
    times: each step costs alpha + beta * (largest message of the step), since links run in parallel.
    """
    if not 1 <= int(n):
        raise ValueError(f"need at least one rank, got n={n}")
    n = int(n)
    length = n if length is None else int(length)
    sizes = [b - a for a, b in chunk_bounds(length, n)]
    held = [[(r,) for _ in range(n)] for r in range(n)]
    states = [RingStep(0, "start", 0, n - 1, tuple(tuple(row) for row in held))]
    total = per_rank = 0
    elapsed = 0.0
    for phase in PHASES[1:]:
        for s in range(n - 1):
            sends = []
            for r in range(n):
                c = (r - s) % n if phase == "reduce-scatter" else (r + 1 - s) % n
                dst = (r + 1) % n
                sends.append(Send(r, dst, c, sizes[c], sizes[c] * itemsize, held[r][c]))
            for m in sends:  # all messages of a step travel at once, then the receivers act
                if phase == "reduce-scatter":
                    held[m.dst][m.chunk] = m.contrib + held[m.dst][m.chunk]
                else:
                    held[m.dst][m.chunk] = m.contrib
            step_bytes = sum(m.nbytes for m in sends)
            biggest = max(m.nbytes for m in sends)
            total += step_bytes
            per_rank += biggest
            step_time = alpha + beta * biggest
            elapsed += step_time
            states.append(RingStep(len(states), phase, s + 1, n - 1,
                                   tuple(tuple(row) for row in held), tuple(sends), step_bytes,
                                   total, per_rank, step_time, elapsed))
    return states


def ring_final_ok(states: list[RingStep]) -> bool:
    """True when every rank holds every chunk summed over all ranks exactly once."""
    last, n = states[-1], states[-1].n
    return all(sorted(last.held[r][c]) == list(range(n)) for r in range(n) for c in range(n))


def check_ring_exercise(T, owner, n: int = 16, nbytes: int = 256 * MiB, alpha: float = 5e-6,
                        beta: float = 1e-10) -> bool:
    """Notebook 05's exercise: the ring's modelled time T (s) and the rank owning complete chunk A."""
    from dltutor.allreduce.cost import ring_time
    if T is None or owner is None:
        print("Not answered yet: fill in the two values above, then run this cell again.")
        return False
    expect = ring_time(n, nbytes, alpha, beta)
    assert abs(T - expect) <= 0.01 * expect, (
        f"T = {T!r} s is not right: use T = 2(N-1)*alpha + 2(N-1)/N*D*beta with D in bytes "
        f"({fmt_bytes(nbytes)} = {nbytes} bytes) and beta = {beta:g} s/byte")
    assert isinstance(owner, int) and owner_after_reduce_scatter(owner, n) == 0, (
        f"rank {owner!r} does not own A: rank r ends the reduce-scatter owning chunk (r + 1) mod N")
    print(f"Both right: T = {expect * 1e3:.2f} ms, and P{owner} owns A.")
    return True
