"""The verdict of notebook 08's repair exercise (`dltutor.debug.exercise_hang`), from the reports.

    problems, summary = judge(ran, counts, dist_timeout)

The cases are judged in order; the first that failed is named with its counts and the mistake:
a hang (a rank finished its collectives and waited at the end of the case for a rank still inside
a collective it never called), a crash (the rank and its error), or a wrong total (its own values
only, the first m values of each rank only, an average, ...). When every earlier case passed and
this one holds more values than any of them, the verdict adds that a length chosen in advance does
not fit every case.
"""
from __future__ import annotations

from itertools import accumulate
from pathlib import Path

from dltutor.launch.results import error_lines, lost_peer

_HANG = ("Timed out", "timed out", "Application timeout", "waited at its end")


def _reports(ran) -> dict:
    got = {"values": {}, "total": {}, "case": {}, "waited": set()}
    for m in ran.metrics:
        event, key = m.get("event"), (m.get("case"), m.get("rank"))
        if event in ("values", "total"):
            got[event].setdefault(key, m[event])
        elif event == "case":
            got["case"][m.get("rank")] = max(m.get("case", 0), got["case"].get(m.get("rank"), -1))
        elif event == "waited":
            got["waited"].add(key)
    return got


def rank_errors(ran) -> dict[int, str]:
    """{rank: the exception lines of its last traceback} for the ranks whose log holds one."""
    out = {}
    for rank, path in sorted(ran.logs.items()):
        try:
            tail = Path(path).read_text(errors="replace")[-6000:]
        except OSError:
            continue
        if "Traceback" in tail:
            lines = [ln.strip() for ln in error_lines(tail).splitlines() if ln.strip()]
            out[int(rank)] = " ".join(lines)[-400:]
    return out


def first_error(ran) -> str:
    """The cause first: a rank's own error before the timeouts and lost peers it caused."""
    errors = rank_errors(ran)
    own = [r for r, e in errors.items() if not lost_peer(e) and not any(h in e for h in _HANG)]
    pick = own or list(errors)
    if pick:
        return f"rank {pick[0]}: {errors[pick[0]]}"
    return (ran.failure or "").splitlines()[0] if ran.failure else "no error"


def _describe(case: int, counts) -> str:
    return f"case {case} ({', '.join(f'rank {r}: {c} values' for r, c in enumerate(counts))})"


def _hang(case, counts, got, errors, seconds) -> str | None:
    ranks = range(len(counts))
    waited = [r for r in ranks if (case, r) in got["waited"]]
    inside = [r for r in ranks if r not in waited and got["case"].get(r, -1) == case]
    if waited and inside:
        w, s = ", ".join(map(str, waited)), ", ".join(map(str, inside))
        return (f"{_describe(case, counts)} did not finish: rank {w} finished its collectives and "
                f"waited {seconds:g} s at the end of the case for rank {s}, still inside a "
                f"collective rank {w} never called. Every rank must call the same collectives, "
                "however many values it holds")
    if any(any(h in errors.get(r, "") for h in _HANG) for r in ranks):
        return (f"{_describe(case, counts)} did not finish: the ranks waited {seconds:g} s in "
                "collectives that did not match (not the same collectives on every rank, or not in "
                "the same order)")
    return None


def _crash(case, counts, errors) -> str | None:
    """The first rank that failed on its own (not because it lost a peer), and its error."""
    failed = {r: e for r, e in errors.items() if not any(h in e for h in _HANG)}
    own = {r: e for r, e in failed.items() if not lost_peer(e)} or failed
    if not own:
        return None
    r = min(own)
    return f"{_describe(case, counts)}: rank {r} failed: {own[r]}"


def _named(got: float, values: dict, tol: float) -> str:
    """What a wrong total is: the mistake it shows."""
    close = lambda x: abs(got - x) <= tol  # noqa: E731
    world, lens = len(values), [len(v) for v in values.values()]
    want = sum(map(sum, values.values()))
    for r, v in values.items():
        if close(sum(v)):
            return (f"the sum of rank {r}'s values only: no value crossed between the ranks "
                    "(each must receive the others' share through a collective)")
        if close(world * sum(v)):
            return (f"rank {r}'s own sum times {world}: no value crossed between the ranks")
    if close(want / world):
        return "the average over the ranks, not the sum"
    longest = max(lens)
    sums = [list(accumulate(v + [0.0] * (longest - len(v)), initial=0.0)) for v in values.values()]
    prefix = [sum(col) for col in zip(*sums)][:longest]       # the first m values of each rank
    m = min(range(len(prefix)), key=lambda i: abs(got - prefix[i]), default=None)
    if m is not None and close(prefix[m]):        # the nearest prefix: random walks revisit
        if m == min(lens):
            return (f"the first {m} values of each rank only: the values beyond the shortest "
                    "rank's count were dropped")
        return f"the first {m} values of each rank only: the values beyond {m} were dropped"
    return "neither the total nor a part of it that can be named"


def _totals(case, counts, got) -> list[str]:
    values = {r: got["values"].get((case, r)) for r in range(len(counts))}
    problems = []
    for r, v in values.items():
        if v is None:
            problems.append(f"{_describe(case, counts)}: rank {r} never read its values "
                            "(ex.my_values(ctx.rank, case))")
    if problems:
        return problems
    want = sum(map(sum, values.values()))
    tol = 1e-6 * sum(abs(x) for v in values.values() for x in v) + 1e-6   # float32 sums pass
    off = {}                                      # the wrong total -> the ranks that reported it
    for r in range(len(counts)):
        total = got["total"].get((case, r))
        if total is None:
            problems.append(f"{_describe(case, counts)}: rank {r} reported no total "
                            "(ex.report_total(total, case) on every rank, in every case)")
        elif abs(total - want) > tol:
            same = next((t for t in off if abs(t - total) <= tol), total)
            off.setdefault(same, []).append(r)
    for total, who in off.items():
        ranks = f"rank {who[0]}" if len(who) == 1 else "ranks " + ", ".join(map(str, who))
        problems.append(f"{_describe(case, counts)}: {ranks} reported {total:.3f}; the sum of "
                        f"all {sum(counts)} values of the {len(counts)} ranks is {want:.3f}: "
                        f"that is {_named(total, values, tol)}")
    return problems


def _fixed_length(case: int, counts: list) -> str:
    before = max(max(c) for c in counts[:case]) if case else 0
    if case and max(counts[case]) > 10 * before:            # the case of hundreds of values
        return (f"the cases before held at most {before} values per rank and passed; this one "
                f"holds up to {max(counts[case])}: a length chosen in advance does not fit every "
                "case, the ranks must agree on it while they run")
    return ""


def judge(ran, counts: list, dist_timeout: float) -> tuple[list[str], str]:
    """(problems, summary) for a run of the student's script over the cases with `counts`."""
    got, errors = _reports(ran), rank_errors(ran)
    for case, cnt in enumerate(counts):
        problems = _totals(case, cnt, got)
        if not problems and not any((case, r) in got["waited"] for r in range(len(cnt))):
            continue
        if ran.failure:
            why = _hang(case, cnt, got, errors, dist_timeout) or _crash(case, cnt, errors)
            problems = [why] if why else problems
        if not any(got["case"].get(r, -1) >= case for r in range(len(cnt))):
            problems = [f"the script failed before case {case}: {first_error(ran)}"]
        problems = problems or [f"{_describe(case, cnt)} did not finish: {first_error(ran)}"]
        hint = _fixed_length(case, counts)
        return problems + ([hint] if hint else []), ""
    shape = "; ".join(" + ".join(map(str, c)) for c in counts)
    return [], (f"every rank finished all {len(counts)} cases and reported the sum over all ranks "
                f"(how many values each rank held, per case: {shape})")
