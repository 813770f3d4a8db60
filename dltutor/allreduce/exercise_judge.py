"""Judge notebook 05's exercise from what the ranks reported (`dltutor.allreduce.exercise.run`).

    judged = judge(metrics, n=3, lengths=[10, 20, 5])
    judged.problems  # [] when solved; else a head line and what differs, the cause first
    judged.started   # False: nothing of the exercise written (no message, nothing changed)

The first step that differs, case by case: its messages (each rank sends exactly one, to its
right neighbour, holding the chunk `ring.sent_chunk` names, told apart by its size and the sum it
carried: one chunk's bytes, never the whole vector; and receives one from its left neighbour into
a buffer the chunk fits); a rank that raised (its line named), died in gloo or hung; every chunk
of every rank against `ring.ring_steps` (what it holds instead decoded, "A0+C2": P0's chunk 0
plus P2's chunk 2). After N-1 steps each rank's complete chunk must equal dist.all_reduce's.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import numpy as np

from dltutor.allreduce import ring

MAX_LINES = 6                     # lines after the head: the cause first, the rest trimmed
ABSENT = ("silent", "deaf", "many")   # in a step where a rank stopped: consequences, not causes
_LOST = re.compile(r"Connection reset|Connection closed|Broken pipe|Read error|Write error", re.I)
_TIMEOUT = re.compile(r"timed? ?out", re.I)


@dataclass
class Case:
    length: int
    n: int
    start: dict = field(default_factory=dict)       # rank -> vector before the steps
    state: dict = field(default_factory=dict)       # (rank, step) -> vector after the step
    replaced: dict = field(default_factory=dict)    # (rank, step) -> chunk indices rebound
    calls: dict = field(default_factory=dict)       # (rank, step) -> [message dicts]
    errors: dict = field(default_factory=dict)      # (rank, step) -> error record
    reference: dict = field(default_factory=dict)   # rank -> dist.all_reduce of the vectors

    @property
    def bounds(self):
        return ring.chunk_bounds(self.length, self.n)

    @property
    def sizes(self) -> list[int]:
        return [b - a for a, b in self.bounds]

    def chunk(self, values, c: int):
        a, b = self.bounds[c]
        return values[a:b]

    def before(self, rank: int, step: int):
        return self.start.get(rank) if step == 1 else self.state.get((rank, step - 1))


@dataclass
class Judged:
    problems: list = field(default_factory=list)      # [] when solved
    started: bool = True


def parse(metrics: list[dict], n: int, lengths) -> list[Case]:
    cases = [Case(int(length), n) for length in lengths]
    for m in metrics:
        event, r = m.get("event"), m.get("rank")
        if "case" not in m or not 0 <= m["case"] < len(cases):
            continue
        case, key = cases[m["case"]], (r, m.get("step"))
        values = np.asarray(m.get("values", []), dtype=np.float64)
        if event == "start":
            case.start[r] = values
        elif event == "state":
            case.state[key], case.replaced[key] = values, m.get("replaced", [])
        elif event == "call":
            case.calls.setdefault(key, []).append(m)
        elif event == "error":
            case.errors[key] = m
        elif event == "reference":
            case.reference[r] = values
    return cases


def _same(x, y) -> bool:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return x.shape == y.shape and bool(np.all(np.abs(x - y) <= 0.5))   # whole numbers: exact


# ------------------------------------------------------------------ the messages of a step
def _sent_what(case: Case, r: int, s: int, before, m: dict) -> tuple | None:
    """(kind, text): what is wrong with send `m` of rank r in step s (None: the scheduled chunk,
    exactly), from its size and the sum of what it carried."""
    e, k, total, sizes = ring.sent_chunk(r, s, case.n), m.get("numel", 0), m.get("sum"), case.sizes
    said = f"P{r} sent {k} elements ({m['nbytes']} bytes) in step {s}"
    want = f"chunk {e} ({sizes[e]} elements, {4 * sizes[e]} bytes)"
    fits = [c for c in range(case.n) if sizes[c] == k and total is not None
            and _same(total, case.chunk(before, c).sum())]
    part = [c for c in range(case.n) if total is not None and 0 < k < sizes[c]
            and _same(total, case.chunk(before, c)[:k].sum())]
    if k == case.length and case.n > 1:
        return "whole", (f"{said}, its whole vector: a ring step sends one chunk, here {want}, "
                         f"so each message carries about 1/N of the vector")
    if e in fits:
        return None if m["nbytes"] == 4 * k else (
            "dtype", f"{said}, chunk {e} as {m['dtype']}: send the float32 chunk as it is")
    if fits:
        return "chunk", (f"P{r} sent its chunk {fits[0]} in step {s}, but the schedule sends "
                         f"chunk {e} in step {s} (rank r sends chunk (r - s + 1) mod N)")
    if part:
        uneven = (f": {case.length} elements do not divide by {case.n} ranks, so the chunks are "
                  f"{sizes} elements long (torch.tensor_split makes the first "
                  f"{case.length % case.n} of them one element longer)"
                  if k == case.length // case.n else "")
        return "part", (f"P{r} sent only the first {k} of chunk {part[0]}'s {sizes[part[0]]} "
                        f"elements in step {s}{uneven}; send the whole chunk")
    return "other", (f"{said} that are not one of its chunks as they stood before the step; "
                     f"the schedule sends {want}")


def _message_problems(case: Case, s: int) -> list[tuple]:
    """(kind, rank, text) for every rank whose messages in step s break the ring's rule."""
    out, n = [], case.n
    for r in (r for r in range(n) if case.before(r, s) is not None):
        right, left, arriving = (r + 1) % n, (r - 1) % n, ring.sent_chunk((r - 1) % n, s, n)
        calls = case.calls.get((r, s), [])
        sends = [m for m in calls if m["name"] in ("send", "isend")]
        recvs = [m for m in calls if m["name"] in ("recv", "irecv")]
        if len(sends) != 1:
            out.append(("many" if sends else "silent", r, (
                f"P{r} sent {len(sends)} messages in step {s}: a ring step sends one chunk, in "
                f"one message" if sends else f"P{r} sent nothing in step {s}: each step every "
                f"rank sends one chunk to its right neighbour")))
        if sends and sends[0].get("peer") != right:
            out.append(("peer", r, f"P{r} sent to P{sends[0].get('peer')} in step {s}: in the "
                                   f"ring every rank sends to its right neighbour, here P{right}"))
        what = sends and _sent_what(case, r, s, case.before(r, s), sends[0])
        if what:
            out.append((what[0], r, what[1]))
        if not recvs:
            out.append(("deaf", r, f"P{r} received nothing in step {s}: each step every rank "
                                   f"receives one chunk from its left neighbour"))
        elif recvs[0].get("peer") != left:
            out.append(("recv-peer", r, f"P{r} received from P{recvs[0].get('peer')} in step "
                                        f"{s}: in the ring every rank receives from its left "
                                        f"neighbour, here P{left}"))
        elif recvs[0].get("numel", 0) < case.sizes[arriving]:
            out.append(("small", r, f"P{r} received into a buffer of {recvs[0].get('numel')} "
                                    f"elements in step {s}, but the chunk its left neighbour "
                                    f"sends it (chunk {arriving}) has {case.sizes[arriving]}"))
    return out


# ------------------------------------------------------------------ the vectors after a step
def _term(rank: int, chunk: int) -> str:
    return f"{ring.rank_letter(rank)}{chunk}"


def explain(case: Case, r: int, c: int, got) -> str:
    """What P{r}'s chunk c holds, as a sum of the ranks' starting chunks ("B0+A0", "A0+C2")."""
    if not all(k in case.start for k in range(case.n)):
        return "values the check cannot decode"
    size = case.sizes[c]
    if _same(got, np.zeros(size)):
        return "zeros"
    own = [case.chunk(case.start[k], c) for k in range(case.n)]
    for mult in itertools.product(range(3), repeat=case.n):        # A0, B0+A0, A0+A0, ...
        if any(mult) and _same(got, sum(m * v for m, v in zip(mult, own))):
            terms = [(k, c) for k in sorted(range(case.n), key=lambda k: (k != r, k))
                     for _ in range(mult[k])]
            return "+".join(_term(*t) for t in terms)
    pairs = [(k, c2) for k in range(case.n) for c2 in range(case.n) if case.sizes[c2] == size]
    if len(pairs) <= 16:                                            # another chunk mixed in
        table = np.array([case.chunk(case.start[k], c2) for k, c2 in pairs])
        picks = np.array(list(itertools.product((0, 1), repeat=len(pairs))), dtype=np.float64)
        hit = np.flatnonzero(np.all(np.abs(picks @ table - np.asarray(got)) <= 0.5, axis=1))
        if hit.size:
            terms = sorted((p for p, on in zip(pairs, picks[hit[0]]) if on),
                           key=lambda t: (t[0] != r, t))
            return "+".join(_term(*t) for t in terms)
    return "values that are no sum of the ranks' chunks"


def _state_problems(case: Case, s: int) -> list[tuple]:
    model = [st for st in ring.ring_steps(case.n, case.length)
             if st.phase == "reduce-scatter"][s - 1]
    out = []
    for r in range(case.n):
        after, before = case.state[(r, s)], case.before(r, s)
        arriving = ring.sent_chunk((r - 1) % case.n, s, case.n)
        for c in range(case.n):
            got = case.chunk(after, c)
            want = sum(case.chunk(case.start[k], c) for k in model.held[r][c])
            if _same(got, want):
                continue
            text = f"P{r}, chunk {c}: holds {explain(case, r, c, got)}, the step model says " \
                   f"{model.label(r, c)}"
            kind, old = "state", case.chunk(before, c)
            if c in case.replaced.get((r, s), []):
                kind, text = "replaced", text + (
                    f" (chunks[{c}] was replaced by a new tensor, so the vector itself did not "
                    f"change: change the chunk in place)")
            elif c == arriving and _same(got, old):
                kind, text = "unchanged", text + " (what arrived was not added to it)"
            elif c == arriving and _same(got, want - old):
                kind, text = "copied", text + (" (what arrived replaced the chunk instead of "
                                               "being added to it)")
            out.append((kind, r, text))
    return out


# ------------------------------------------------------------------ a rank that stopped
def _gloo_reason(failure: str, r: int) -> str:
    for line in failure.splitlines():
        if re.match(rf"\s*rank {r}:", line):
            text = re.sub(r"\[[^\]]*(?:/|\\)[^\]]*\]\s*", "", line.split(":", 1)[1])
            return re.sub(r"\s+", " ", text.replace("what():", "")).strip()[:200]
    return "no Python error: the process ended inside gloo"


def _crash_problems(case: Case, s: int, stopped: list[int], failure: str,
                    timeout: float) -> list[tuple]:
    errors = sorted(((r, st, e) for (r, st), e in case.errors.items() if st >= s),
                    key=lambda x: x[2].get("t", 0))
    own = [x for x in errors if not (_LOST.search(x[2]["error"]) or
                                     _TIMEOUT.search(x[2]["error"]))]
    waited = [x for x in errors if _TIMEOUT.search(x[2]["error"])]
    out = [("error", r, f"P{r} failed in step {st}: {e['error'].splitlines()[-1][:300]}"
            + (f" (your {e['line']})" if e.get("line") else "")) for r, st, e in own]
    quiet = [r for r in stopped if not any(x[0] == r for x in errors)]
    if not own and quiet:
        out += [("died", r, f"P{r} died in step {s}: {_gloo_reason(failure, r)}") for r in quiet]
    if waited and not own and not quiet:      # nobody failed: they all waited
        firsts = [case.calls.get((r, s), [{}])[0].get("name") for r in range(case.n)]
        why = ("every rank first called the blocking dist.send, which returns only once its "
               "neighbour receives, while that neighbour is stuck in its own send: a deadlock; "
               "post the send and the receive before waiting on either"
               if all(f == "send" for f in firsts) else
               "a send or a receive had no matching receive or send on the neighbour")
        out.append(("hang", None, f"the ranks hung: they waited for each other until the "
                                  f"{timeout:g} s timeout in step {s}: {why}"))
    else:
        rest = sorted({x[0] for x in errors if x not in own} - set(quiet))
        if rest:
            out.append(("after", None, f"P{', P'.join(map(str, rest))} then stopped waiting "
                                       f"for it (a consequence)"))
    return out or [("stopped", None, f"rank(s) {stopped} stopped in step {s}: "
                                     f"{failure.strip().splitlines()[0] if failure else ''}")]


# ------------------------------------------------------------------ putting it together
def _lines(problems: list[tuple]) -> list[str]:
    """One line per kind of problem (the first rank's), naming the other ranks alike."""
    first, alike = {}, {}
    for kind, r, text in problems:
        (alike.setdefault(kind, []).append(r) if kind in first and r is not None
         else first.setdefault(kind, text))
    return [text + (f" (the same on P{', P'.join(map(str, sorted(alike[k])))})"
                    if alike.get(k) else "") for k, text in first.items()][:MAX_LINES]


def _head(case: Case, s: int) -> str:
    return (f"with {case.length} elements on {case.n} ranks (chunks of {case.sizes} elements), "
            f"reduce-scatter step {s} of {case.n - 1}:")


def _started(case: Case) -> bool:
    """Anything of the exercise written: an error, a message, or a chunk changed in step 1."""
    return bool(case.errors) or any(case.calls.get((r, 1)) for r in range(case.n)) or not all(
        (r, 1) in case.state and r in case.start and _same(case.state[(r, 1)], case.start[r])
        for r in range(case.n))


def _final_problems(case: Case) -> list[str]:
    """Each rank's complete chunk against dist.all_reduce's result for it."""
    owned = {r: ring.owner_after_reduce_scatter(r, case.n) for r in range(case.n)}
    return [f"P{r}'s complete chunk {o} differs from dist.all_reduce's result for it"
            for r, o in owned.items() if r not in case.reference or not _same(
                case.chunk(case.state[(r, case.n - 1)], o), case.chunk(case.reference[r], o))]


def judge(metrics: list[dict], n: int, lengths, failure: str = "",
          timeout: float = 10) -> Judged:
    cases = parse(metrics, n, lengths)
    if not _started(cases[0]):
        return Judged(["step 1 changed nothing on any rank and no rank sent anything: fill in "
                       "the TODOs"], started=False)
    for case in cases:
        for s in range(1, n):
            stopped = [r for r in range(n) if (r, s) not in case.state]
            messages = _message_problems(case, s)
            problems = ([p for p in messages if p[0] not in ABSENT] +
                        _crash_problems(case, s, stopped, failure, timeout) if stopped else
                        messages + _state_problems(case, s))
            if problems:
                return Judged([_head(case, s), *_lines(problems)])
        final = _final_problems(case)
        if final:
            return Judged([_head(case, n - 1), *final[:MAX_LINES]])
    return Judged()

