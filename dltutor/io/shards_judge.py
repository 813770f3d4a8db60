"""What notebook 07's file-sharding check decides from the ranks' reports (exercise_shards runs
the student's loader and collects them; this module only reads them).

A `Case` is one set of F shard files split over W ranks with one seed, read for `epochs` epochs
(and, with `restart`, once more by a new loader set to the last epoch, as a restarted job builds
it). For every pass of every case the check wants:

    reads       each rank yields exactly the samples it read (read_shard), every file to its end
    coverage    every file read by exactly one rank: disjoint and covering, the remainder files too
    balance     each rank gets floor(F/W) or ceil(F/W) files (the shares differ by one file at most)

and over the passes, where the files are many enough (MANY) that a shuffle cannot repeat an order
by chance (1 in 10! = 3.6 million):

    reshuffled  a new order every epoch, files moving between ranks
    seeded      another seed gives other orders
    restartable a new loader set to epoch e reads the order epoch e read: the order depends only on
                the seed and the epoch
"""
from __future__ import annotations

from dataclasses import dataclass

MANY = 10


@dataclass(frozen=True)
class Case:
    files: int            # shard files, in folder n<files> (the last file shorter)
    world_size: int       # ranks the loader is built for
    seed: int
    restart: bool = False
    epochs: int = 3

    @property
    def name(self) -> str:
        return f"{self.files} files on {self.world_size} ranks, seed {self.seed}"

    @property
    def folder(self) -> str:
        return f"n{self.files}"

    def passes(self) -> list[tuple[int, bool]]:
        """(epoch, restarted) of every pass the ranks make through this case, in order."""
        return [(e, False) for e in range(self.epochs)] + (
            [(self.epochs - 1, True)] if self.restart else [])


def span(ids) -> str:
    ids = sorted(ids)
    if ids and ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"ids {ids[0]}-{ids[-1]}"
    return "ids " + ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")


def _ranks(rs) -> str:
    return "rank " + str(rs[0]) if len(rs) == 1 else "ranks " + " and ".join(map(str, rs))


def _where(case: Case, epoch: int, restarted: bool) -> str:
    again = " (a new loader, as a restarted job builds it)" if restarted else ""
    return f"{case.name}, epoch {epoch}{again}"


# ------------------------------------------------------------------ one pass: reads, coverage
def _reads(where: str, r: int, rep: dict, files: dict) -> list[str]:
    """What rank r yielded against what it read through read_shard, file by file."""
    out, read = [], [i for o in rep["opened"] for i in o["ids"]]
    for o in rep["opened"]:
        if o["file"] not in files:
            out.append(f"{where}, rank {r}: opened {o['file']}, which is not one of the files")
        elif o["ids"] != files[o["file"]]:
            left = sorted(set(files[o["file"]]) - set(o["ids"]))
            out.append(f"{where}, rank {r}: read {len(o['ids'])} of the {len(files[o['file']])} "
                       f"samples of {o['file']} (not {span(left)}): read each file to its end")
    if None in rep["ids"]:
        out.append(f"{where}, rank {r}: yielded items that are not what ex.read_shard(path) gives "
                   "(image, label, sample id): yield its items as they are")
        return out
    made_up = sorted(set(rep["ids"]) - set(read))
    if made_up:
        out.append(f"{where}, rank {r}: yielded {span(made_up)}, which it did not read from the "
                   "files: yield what ex.read_shard(path) gives")
    elif sorted(rep["ids"]) != sorted(read):
        dropped = sorted(set(read) - set(rep["ids"])) or sorted(read)
        out.append(f"{where}, rank {r}: read {len(read)} samples from its files but yielded "
                   f"{len(rep['ids'])} (e.g. not {span(dropped)} as often as read): file-level "
                   "sharding yields every sample of each of the rank's files, once")
    return out


def _coverage(where: str, case: Case, by_rank: dict, files: dict) -> list[str]:
    """Which files more than one rank read (and who), which no rank read, and the likely why."""
    out, opened = [], {f: [] for f in files}
    for r, rep in by_rank.items():
        for o in rep["opened"]:
            opened.setdefault(o["file"], []).append(r)
    twice = {f: rs for f, rs in opened.items() if len(rs) > 1 and f in files}
    never = [f for f, rs in opened.items() if not rs]
    for f, rs in list(twice.items())[:3]:
        out.append(f"{where}: {f} ({span(files[f])}) was read by {_ranks(rs)}")
    for f in never[:3]:
        out.append(f"{where}: {f} ({span(files[f])}) was read by no rank")
    if len(twice) > 3 or len(never) > 3:
        out.append(f"{where}, in all: {len(twice)} of the {len(files)} files read by more than one "
                   f"rank, {len(never)} by none")
    return out + _coverage_hint(case, by_rank, twice, never) if out else out


def _coverage_hint(case: Case, by_rank: dict, twice: dict, never: list) -> list[str]:
    lists = {r: [o["file"] for o in rep["opened"]] for r, rep in by_rank.items()}
    same = [(a, b) for a in lists for b in lists if a < b and lists[a] and lists[a] == lists[b]]
    if twice and all(len(set(ls)) >= case.files for ls in lists.values()):
        return [f"every rank read all {case.files} files: keep only this rank's share of the "
                "shuffled list (whole files, each file on exactly one rank)"]
    if same:
        return [f"ranks {same[0][0]} and {same[0][1]} read the very same files: the share must "
                "depend on the rank the loader is built for (self.rank of self.world_size)"]
    if twice and never:
        return ["the ranks' shares overlap and leave files out: every rank must split the same "
                "order (shuffle with the same seed on every rank: the seed and the epoch, never "
                "the rank) into shares that do not overlap"]
    if twice:
        return ["the ranks' shares overlap: each file belongs to one rank only"]
    rest = case.files % case.world_size
    if len(never) == rest:
        return [f"{case.files} files do not divide evenly by {case.world_size} ranks, and the "
                f"{rest} remainder file{'s' if rest > 1 else ''} must go to some rank too, "
                "not be dropped: every file, every epoch"]
    return ["every file must go to one rank, every epoch"]


def _balance(where: str, case: Case, by_rank: dict) -> list[str]:
    counts = [len(by_rank[r]["opened"]) for r in sorted(by_rank)]
    lo, hi = case.files // case.world_size, -(-case.files // case.world_size)
    if all(lo <= c <= hi for c in counts):
        return []
    share = _share(case).replace("-", " or ")
    return [f"{where}: the ranks read {', '.join(map(str, counts))} files: with {case.files} "
            f"files on {case.world_size} ranks each rank gets {share} (the shares differ by one "
            "file at most; a rank with more files runs more steps while the others wait)"]


def _made_up(rep: dict) -> bool:
    """The rank yielded something other than the samples it read (the files' coverage is moot)."""
    read = {i for o in rep["opened"] for i in o["ids"]}
    return None in rep["ids"] or not set(rep["ids"]) <= read


def pass_problems(case: Case, epoch: int, restarted: bool, by_rank: dict, files: dict) -> list:
    where = _where(case, epoch, restarted)
    found = [p for r, rep in by_rank.items() for p in _reads(where, r, rep, files)]
    if any(_made_up(rep) for rep in by_rank.values()):
        return found
    found += _coverage(where, case, by_rank, files)
    return found or _balance(where, case, by_rank)


# ------------------------------------------------------------------ over the passes
def _reshuffled(case: Case, order: dict) -> tuple[bool, str] | None:
    """(sure, what) when the epochs repeat an order or keep each rank's files; `sure`: a correct
    shuffle does that by chance less than once in millions (see order_problems for the rest).
    `order[(epoch, restarted)]`: each rank's files in the order it read them."""
    epochs = range(case.epochs)
    if all(ls == sorted(ls) for e in epochs for ls in order[(e, False)]):
        return True, (f"{case.name}: in every epoch each rank read its files in the order given "
                      "(by name): the file list is never shuffled; shuffle a copy of it every "
                      "epoch, seeded with the seed and the epoch")
    same = [f"{e - 1} and {e}" for e in epochs[1:] if order[(e, False)] == order[(e - 1, False)]]
    if same:
        return True, (f"{case.name}: the same order in epochs {', '.join(same)}: shuffle with a "
                      "seed that includes the epoch (set_epoch(epoch) is called before each epoch)")
    if all(len({frozenset(order[(e, False)][r]) for e in epochs}) == 1
           for r in range(case.world_size)):
        return False, (f"{case.name}: each rank read the same files in all {case.epochs} epochs, "
                       "only reordered: shuffle the whole file list, then split it, so files "
                       "move between ranks")
    return None


def _seeded(a: Case, b: Case, orders: dict) -> str | None:
    same = [e for e in range(min(a.epochs, b.epochs))
            if orders[a][(e, False)] == orders[b][(e, False)]]
    if not same:
        return None
    epochs = f"epoch{'s' if len(same) > 1 else ''} {', '.join(map(str, same))}"
    return (f"{a.files} files on {a.world_size} ranks: seeds {a.seed} and {b.seed} gave the same "
            f"order in {epochs}: the order must come from the loader's seed as well as the epoch")


def _restartable(case: Case, order: dict) -> str | None:
    last = case.epochs - 1
    if not case.restart or order[(last, True)] == order[(last, False)]:
        return None
    return (f"{case.name}: a new loader set to epoch {last} (what a restarted job builds) read "
            f"another order than epoch {last} did: the order must depend only on the seed and "
            "the epoch, not on the epochs the loader ran before (shuffle a fresh copy of the "
            "file list)")


def order_problems(cases: list[Case], orders: dict) -> list[str]:
    """`orders[case][(epoch, restarted)]`: per rank, its files in the order it read them."""
    many = [c for c in cases if c.files >= MANY]
    flagged = [f for c in many for f in [_reshuffled(c, orders[c])] if f]
    if not any(sure for sure, _ in flagged) and len(flagged) < len(many):
        flagged = []             # files kept by their ranks in one case only: can be chance
    found = [what for _, what in flagged[:1]] + (
        [f"the same in {len(flagged) - 1} more cases"] if len(flagged) > 1 else [])
    pairs = [(a, b) for i, a in enumerate(many) for b in many[i + 1:]
             if (a.files, a.world_size) == (b.files, b.world_size) and a.seed != b.seed]
    found += [p for a, b in pairs for p in [_seeded(a, b, orders)] if p]
    return found + [p for c in cases for p in [_restartable(c, orders[c])] if p]


# ------------------------------------------------------------------ the verdict's evidence
def _failed(m: dict) -> str:
    again = " (a new loader)" if m.get("restart") else ""
    return (f"{m.get('case', '?')}, rank {m.get('loader_rank', m.get('rank'))}, epoch "
            f"{m.get('epoch')}{again}: the loader failed: {m.get('error')}")


def judge(metrics: list[dict], cases: list[Case], files: dict) -> tuple[list[str], str]:
    """(problems, summary) for the ranks' reports; `files[case.folder]`: {file name: its ids}."""
    errors = [m for m in metrics if m.get("event") == "error"]
    if errors:
        return [_failed(m) for m in errors[:4]], ""
    got = {(m["case"], m["loader_rank"], m["epoch"], bool(m.get("restart"))): m
           for m in metrics if m.get("event") == "epoch"}
    absent = [f"{c.name}: rank {r} reported no epoch {e}" for c in cases for e, again in c.passes()
              for r in range(c.world_size) if (c.name, r, e, again) not in got]
    if absent:
        return absent[:4], ""
    problems, later = [], 0
    for c in cases:
        for e, again in c.passes():
            by_rank = {r: got[(c.name, r, e, again)] for r in range(c.world_size)}
            found = pass_problems(c, e, again, by_rank, files[c.folder])
            if found and not problems:
                problems = found                  # the first pass that went wrong, in full
            elif found:
                later += 1
    if later:
        problems.append(f"also wrong in {later} more pass(es) of the cases above")
    if problems:
        return problems, ""
    orders = {c: {(e, again): [[o["file"] for o in got[(c.name, r, e, again)]["opened"]]
                               for r in range(c.world_size)] for e, again in c.passes()}
              for c in cases}
    return order_problems(cases, orders), summary(cases)


def _share(c: Case) -> str:
    lo, hi = c.files // c.world_size, -(-c.files // c.world_size)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def summary(cases: list[Case]) -> str:
    shapes = "; ".join(f"{c.name}: {_share(c)} files a rank" for c in cases)
    return (f"{len(cases)} cases, {cases[0].epochs} epochs each ({shapes}): every "
            "file read whole by exactly one rank in every epoch, the shares within one file of "
            "each other, a new order every epoch with files moving between ranks, other orders "
            "for another seed, and the same order again in a new loader set to the last epoch")
