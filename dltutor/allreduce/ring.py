"""The step model of ring all-reduce: who holds what after every step, with the seed's labels.

No torch here: this is bookkeeping a student can step through (see `dltutor.allreduce.visualizer`).

Labels follow the TACC slides (seed 004, quoted in `dltutor.core.sources`): rank P0 holds
A0 A1 ... A7, P1 holds B0 ... B7, ..., P7 holds H0 ... H7. The LETTER is the rank whose data it is
(A = P0's vector), the DIGIT is the chunk index. A partial sum is written as the slides write it,
the receiving rank first, then what arrived: on 8 ranks, after reduce-scatter step 2, P0's chunk 6
reads "A6+H6+G6" (P6 sent G6 to P7 in step 1, P7 sent H6+G6 to P0 in step 2).
`style="chunk-letter"` gives the transposed reading (letter = chunk, digit = rank: "G0+G7+G6").

Schedule, steps numbered 1 .. N-1 in each phase as on the slides (`sent_chunk`):
- reduce-scatter (the slides' "Reduce Phase"): in step s rank r sends chunk (r - s + 1) mod N to
  rank r+1, which adds it to its own copy. After N-1 steps rank r owns the complete sum of chunk
  (r + 1) mod N.
- all-gather (the slides' "Scatter Phase"): in step s rank r sends the complete chunk
  (r - s + 2) mod N to rank r+1, which overwrites its copy. After N-1 more steps every rank holds
  every complete chunk.

Tensor lengths need not be multiples of N: chunk boundaries follow `numpy.array_split` (the first
`length % N` chunks have one extra element); with length < N some chunks are empty (0 bytes).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dltutor.core.units import MiB, fmt_bytes
from dltutor.grading.numbers import as_float, as_int, kind

PHASES = ("start", "reduce-scatter", "all-gather")


def rank_letter(rank: int) -> str:
    """The letter of a rank's data on the slides: P0 -> A, P1 -> B, ...; after Z: AA, AB, ..."""
    s, c = "", int(rank)
    while True:
        s = chr(ord("A") + c % 26) + s
        c = c // 26 - 1
        if c < 0:
            return s


SEED_PHASE = {"reduce-scatter": "Reduce Phase", "all-gather": "Scatter Phase"}  # seed 004's names


def sent_chunk(rank: int, step: int, n: int, phase: str = "reduce-scatter") -> int:
    """The chunk rank `rank` sends to rank+1 in `step` (1 .. N-1) of `phase`."""
    if not 1 <= step <= n - 1:
        raise ValueError(f"steps are numbered 1 .. N-1 = {n - 1}, got {step}")
    shift = {"reduce-scatter": 1, "all-gather": 2}[phase]
    return (rank - step + shift) % n


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


def label(chunk: int, ranks, *, style: str = "seed", max_terms: int | None = None,
          n: int | None = None) -> str:
    """The seed's label of a (partial) sum of chunk `chunk` over `ranks` (receiver first), e.g.
    label(6, (0, 7, 6)) == "A6+H6+G6".

    `max_terms` shortens long sums as the slides do: a complete sum (len(ranks) == n) becomes
    "A6…H6", any other longer sum first+…+last with its count, e.g. "A5+…+F5 (4)".
    """
    if style not in ("seed", "chunk-letter"):
        raise ValueError(f"style must be 'seed' or 'chunk-letter', got {style!r}")

    def term(r):
        if style == "chunk-letter":
            return f"{rank_letter(chunk)}{r}"
        return f"{rank_letter(r)}{chunk}"
    ranks = tuple(ranks)
    if max_terms is not None and len(ranks) > max_terms:
        if n is not None and len(ranks) == n:
            return f"{term(min(ranks))}…{term(max(ranks))}"
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
    held: tuple           # held[rank][chunk] -> contributing ranks, holder first (the slides' order)
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
        return (f"{self.phase} step {self.phase_step} of {self.phase_steps}"
                f" (the slides' {SEED_PHASE[self.phase]})")

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
                c = sent_chunk(r, s + 1, n, phase)
                dst = (r + 1) % n
                sends.append(Send(r, dst, c, sizes[c], sizes[c] * itemsize, held[r][c]))
            for m in sends:  # all messages of a step travel at once, then the receivers act
                if phase == "reduce-scatter":
                    held[m.dst][m.chunk] = held[m.dst][m.chunk] + m.contrib  # receiver first
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


def _time_problem(T, n: int, nbytes: int, alpha: float, beta: float) -> str | None:
    """What is wrong with the answer T (seconds) to the ring's modelled time, or None."""
    from dltutor.allreduce.cost import ring_time
    expect, t = ring_time(n, nbytes, alpha, beta), as_float(T)
    if t is None:
        return f"T is {kind(T)}, not a number: give the time in seconds (a float)"
    if abs(t - expect) <= 0.01 * expect:
        return None
    for factor, unit in ((1e3, "milliseconds"), (1e6, "microseconds")):
        if abs(t - factor * expect) <= 0.01 * factor * expect:
            return f"T = {t:g}: is it in {unit}? The answer is asked in seconds"
    return (f"T = {t:g} s is not the model's time: check each term (how many latency steps, how "
            "many bytes each rank sends) and the units (D in bytes, beta in s/byte)")


def _owner_problem(rank, n: int) -> str | None:
    """What is wrong with the answer `rank` to "who owns complete chunk 0", or None. Never names
    the owner, nor the rule that gives it."""
    r = as_int(rank)
    if r is None:
        what = "a rank is a whole number (an int, not a float)" if as_float(rank) is not None \
            else "not a rank number"
        return f"the rank is {kind(rank)}: {what}"
    if not 0 <= r < n:
        return f"rank {r} is not one of the N = {n} ranks (0 to {n - 1})"
    if owner_after_reduce_scatter(r, n) != 0:
        return (f"rank {r} does not hold the complete sum of chunk 0 after the reduce-scatter: "
                "follow chunk 0 from the rank that sends it first, one hop per step, until it "
                "has picked up every rank's contribution (the widget above shows each step)")
    return None


def check_ring_exercise(T, chunk0_owner, n: int = 16, nbytes: int = 256 * MiB, alpha: float = 5e-6,
                        beta: float = 1e-10) -> bool:
    """Notebook 05's quiz: the ring's modelled time T (s) and the rank owning complete chunk 0.
    Prints one verdict line per answer (a wrong one says what to reconsider, never the answer)
    and returns True when both are right."""
    if T is None or chunk0_owner is None:
        print("Not answered yet: fill in the two values above, then run this cell again.")
        return False
    problems = [x for x in (_time_problem(T, n, nbytes, alpha, beta),
                            _owner_problem(chunk0_owner, n)) if x]
    if problems:
        print("\n".join(f"Not yet: {x}." for x in problems))
        return False
    from dltutor.allreduce.cost import ring_time
    print(f"Both right: T = {ring_time(n, nbytes, alpha, beta) * 1e3:.2f} ms, and "
          f"P{as_int(chunk0_owner)} owns chunk 0 (A0+…+P0 summed).")
    return True
