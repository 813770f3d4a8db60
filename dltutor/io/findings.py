"""What notebook 07's measurements showed, in sentences built from their numbers
(dltutor.core.findings): every comparison carries the run's own spread and says "inconclusive
here" when the gap is inside it, with what it would take to decide it.

Every "±" of a read rate is the 95 % confidence interval of the mean over that set-up's passes,
timed in interleaved rounds (`dltutor.io.rounds`): the spread between passes, which covers the
machine's slow minutes, not the narrower interval within one pass. A set-up without one (nan: one
pass) decides nothing. The step timelines' sentences are in `findings_steps`.

* `formats(reads, device)`: cold and warm shards vs files, raw arrays vs PNG files, cold vs warm;
* `passes(rows)`: per set-up, its passes, the spread over them and the load average with them;
* `workers(sweep)`: each num_workers against 0, each prefetch_factor against the smallest;
* `sharding(rows)`: every sample exactly once, file-level shards vs DistributedSampler per rank;
* `staging(staged)`: the copy, shared vs local reads, and whether staging can pay off here;
* `starving`, `pipelines`, `exercise`: the timelines (`dltutor.io.findings_steps`).
"""
from __future__ import annotations

import math
import os

from dltutor.core.findings import INCONCLUSIVE, compare, differs, fmt
from dltutor.core.spread import combined
from dltutor.io.findings_steps import INCONCLUSIVE_LINE, exercise, pipelines, starving  # noqa: F401

RATE = "samples/s"
NAN = float("nan")   # no interval


def _rate(rows, **match):
    return next((r for r in rows if all(r.get(k) == v for k, v in match.items())), None)


def needed(gap: float, spread: float, what: str = "passes") -> str:
    """What deciding `gap` would take: the combined interval must shrink below it, and an
    interval of a mean shrinks with the square root of the number of measurements."""
    if not gap or math.isnan(spread) or spread <= gap:
        return ""
    k = spread / gap
    return (f" To decide a gap this size the combined interval would have to shrink {k:.1f}x: "
            f"about {k * k:.0f}x as many {what}.")


def _compare_rates(name_a, a, name_b, b, what: str = "passes") -> str:
    sa, sb = a.get("spread_per_s", NAN), b.get("spread_per_s", NAN)
    said = compare(name_a, a["samples_per_s"], name_b, b["samples_per_s"], unit=RATE,
                   spread_a=sa, spread_b=sb)
    if not differs(a["samples_per_s"], b["samples_per_s"], sa, sb):
        said += needed(abs(a["samples_per_s"] - b["samples_per_s"]), combined(sa, sb), what)
    return said


def device_line(device: dict | None) -> list[str]:
    """Where 'cold' reads came from: the block device, and what a virtual disk adds."""
    if not device:
        return []
    line = f"The files are on /dev/{device['name']}"
    if device.get("virtual"):
        line += (f" (disk {device['disk']}, a virtual disk): 'cold' means cold for this machine's "
                 "kernel only; the host behind a virtual disk may keep its own cache of the data, "
                 "so a cold pass can run close to RAM speed.")
    else:
        line += f" (disk {device.get('disk')})."
    return [line]


def formats(reads: list[dict], device: dict | None = None) -> list[str]:
    """Sentences on `bench.read_formats` rows (one row per format and cache state)."""
    out = device_line(device)
    row = lambda fmt_, cache: _rate(reads, format=fmt_, asked=cache)  # noqa: E731
    for cache in ("cold", "warm"):
        files, shards = row("files", cache), row("shards", cache)
        if files and shards:
            out.append(f"{cache.capitalize()}: " + _compare_rates("shards", shards, "small files", files)
                       + (_why_shards_warm(shards, files) if cache == "warm" else ""))
    warm_files = row("files", "warm")
    for raw in ("memmap", "hdf5"):
        if warm_files and row(raw, "warm"):
            out.append("Warm: " + _compare_rates(raw, row(raw, "warm"), "small files (PNG)", warm_files))
    for fmt_ in dict.fromkeys(r["format"] for r in reads):
        cold, warm = row(fmt_, "cold"), row(fmt_, "warm")
        if cold and warm:
            out.append(f"{fmt_}: " + _warm_vs_cold(warm, cold))
    out += [f"The {r['asked']} passes of {r['format']} found {r['resident_before']:.0%} of its files in RAM "
            f"on average ({r['cache']}): read that row as {r['cache']}." for r in reads if r["cache"] != r["asked"]]
    return out


def _why_shards_warm(shards: dict, files: dict) -> str:
    """Warm, both pay one PNG decode per sample: what differs is the container."""
    a, b = shards["samples_per_s"], files["samples_per_s"]
    if not differs(a, b, shards.get("spread_per_s", NAN), files.get("spread_per_s", NAN)):
        return ""
    if a < b:
        return (" Warm, both decode one PNG per sample and nothing comes from the device, so the gap "
                "is the container: reading each member through Python's tarfile (a 512-byte header "
                "parsed per member) cost more here than the open() per small file it saves. That saving "
                "is largest where a lookup is slow (a parallel file system's metadata server); on this "
                "machine the directory entries stay cached (section 2), so it cannot show.")
    return (" Warm, both decode one PNG per sample, so the gap is the container: the open() per small "
            "file that shards save cost more here than parsing the tar members.")


def _warm_vs_cold(warm: dict, cold: dict) -> str:
    """Warm against cold. A warm page cache only takes device reads away, so a warm pass slower
    than the cold one beyond the spreads is not an effect; a gap inside them says the device (or
    a cache behind it) delivered this format about as fast as RAM."""
    said = _compare_rates("warm", warm, "cold", cold)
    sa, sb = warm.get("spread_per_s", NAN), cold.get("spread_per_s", NAN)
    if not differs(warm["samples_per_s"], cold["samples_per_s"], sa, sb):
        if math.isnan(sa) or math.isnan(sb):
            return said
        return (said + f" The cold passes still read {cold['mb_per_s']:.3g} MB/s from the device, and the "
                f"warm passes were {warm['samples_per_s'] / cold['samples_per_s']:.2f}x as fast on average: "
                "for this format the cache's effect does not stand out from the noise between passes here.")
    if warm["samples_per_s"] >= cold["samples_per_s"]:
        return said
    return (f"warm {fmt(warm['samples_per_s'], RATE)} vs cold {fmt(cold['samples_per_s'], RATE)}: warm "
            "was slower, which a page cache cannot cause (it only takes device reads away), so this "
            f"gap is noise between passes, larger than their intervals (±{fmt(sa)} and "
            f"±{fmt(sb)}): {INCONCLUSIVE}, no effect of the cache.")


def sizes(rows: list[dict]) -> list[str]:
    """Sentences on `bench.sizes`: the bytes each format holds beside the space it takes."""
    out = []
    for r in rows:
        ratio = r["allocated_mb"] / r["apparent_mb"] if r["apparent_mb"] else float("nan")
        out.append(f"{r['format']}: {r['files']:,} file(s) hold {r['apparent_mb']:.3g} MB and take "
                   f"{r['allocated_mb']:.3g} MB on the device ({ratio:.2f}x; "
                   f"{1e3 * r['allocated_mb'] / max(r['files'], 1):,.1f} kB allocated per file).")
    return out


def passes(rows: list[dict]) -> list[str]:
    """Per set-up (rows of `rounds.over_passes`): its passes' rates, the interval over them beside
    the widest interval within one pass, and the 1-minute load average seen with them; then how
    many passes' own (within-pass) intervals missed their set-up's mean over passes."""
    out, missed, total = [], 0, 0
    for r in rows:
        if r.get("passes", 1) < 2:
            continue
        w = r["workers"]
        name = (f"{r['format']}" + (f" ({r['place']})" if r.get("place") else "")
                + f", {w} worker{'s' if w != 1 else ''}" + (f", prefetch {r['prefetch']}" if w else ""))
        over, within = r.get("spread_per_s", NAN), r.get("within_spread_per_s", NAN)
        for x, s in zip(r["pass_rates"], r.get("pass_spreads", [])):
            if not math.isnan(s):
                total += 1
                missed += abs(x - r["samples_per_s"]) > s
        out.append(f"{name}, {r['cache']}: {r['passes']} passes at "
                   + ", ".join(fmt(x) for x in r["pass_rates"]) + f" {RATE}; ± over passes {fmt(over)}, "
                   f"widest ± within one pass {fmt(within)}; 1-minute load average {r['load_1m']}.")
    if total:
        out.append(f"{missed} of {total} passes ({missed / total:.0%}) lie farther from their set-up's mean "
                   "over passes than their own within-pass 95 % interval reaches (about 5 % would, if one "
                   "pass's interval covered the noise between passes). Every verdict above uses the "
                   "interval over passes.")
    return out


def repeats(rows: list[dict]) -> list[str]:
    """The same configuration (format, split, workers, batch size, cache state) measured in more
    than one section, minutes apart: do the sections' means (each over its passes) agree?"""
    groups = {}
    for r in rows:
        key = (r["format"], r.get("how"), r["workers"], r.get("batch_size"), r["cache"],
               r.get("prefetch") if r["workers"] else None)   # prefetch_factor needs workers
        mine = groups.setdefault(key, [])
        if not any(r["seconds"] == q["seconds"] for q in mine):   # a row shown twice is one measurement
            mine.append(r)
    out = []
    for (fmt_, how, w, batch, cache, _), means in groups.items():
        if len(means) < 2:
            continue
        rates = [p["samples_per_s"] for p in means]
        spreads = [p.get("spread_per_s", NAN) for p in means]
        hi, lo = means[rates.index(max(rates))], means[rates.index(min(rates))]
        gap = max(rates) - min(rates)
        head = (f"{fmt_} ({how}, {w} workers, batch {batch}, {cache}) was measured in {len(means)} sections: "
                + ", ".join(f"{fmt(x, RATE)} ±{fmt(s)}" for x, s in zip(rates, spreads)))
        loads = ", ".join(str(p.get("load_1m", "n/a")) for p in means)
        if any(math.isnan(x) for x in spreads):
            out.append(head + f"; a measurement without an interval leaves the gap ({fmt(gap, RATE)}) {INCONCLUSIVE}.")
        elif differs(max(rates), min(rates), hi.get("spread_per_s", NAN), lo.get("spread_per_s", NAN)):
            out.append(head + f". They lie {fmt(gap, RATE)} ({gap / min(rates):.0%}) apart, more than their "
                       f"intervals: conditions changed between sections (1-minute load average {loads}; what else "
                       "differed, such as the cache of directory entries and inodes that no pass drops, is not "
                       "measured), so compare only set-ups timed in the same interleaved rounds, as each section does.")
        else:
            out.append(head + f": they agree within their intervals (1-minute load average {loads}).")
    return out or ["No configuration was measured in more than one section: no repeat to compare."]


def workers(sweep: list[dict]) -> list[str]:
    """Sentences on `bench.worker_sweep` rows (num_workers x prefetch_factor, mean over passes)."""
    pfs = sorted({r["prefetch"] for r in sweep if r["workers"]})
    base = _rate(sweep, workers=0)
    name = lambda w: f"{w} worker" + ("s" if w != 1 else "")  # noqa: E731
    out = []
    for w in sorted({r["workers"] for r in sweep} - {0}):
        row = _rate(sweep, workers=w, prefetch=pfs[0])
        line = _compare_rates(name(w), row, "0 workers", base)
        if differs(row["samples_per_s"], base["samples_per_s"], row.get("spread_per_s", NAN),
                   base.get("spread_per_s", NAN)) and row["samples_per_s"] < base["samples_per_s"]:
            line += (f" {name(w)} and the main process shared {os.cpu_count()} cores (1-minute load "
                     f"average {row.get('load_1m', 'n/a')}): with no idle core a worker adds a process, "
                     f"not a core, and each pass paid its start ({1e3 * row['ttfb_s']:.0f} ms to the "
                     "first batch).")
        out.append(line)
        for pf in pfs[1:]:
            deep = _rate(sweep, workers=w, prefetch=pf)
            line = f"{name(w)}: " + _compare_rates(f"prefetch_factor={pf}", deep, f"prefetch_factor={pfs[0]}", row)
            if differs(deep["samples_per_s"], row["samples_per_s"], deep.get("spread_per_s", NAN),
                       row.get("spread_per_s", NAN)):
                line += (" This sweep has no training step whose pace could fluctuate, the case a deeper "
                         "buffer is for, so the prediction above was no gap: this one is either a real "
                         "effect of the buffer's depth on the reading itself or one of this cell's "
                         f"{len(pfs) * len({r['workers'] for r in sweep} - {0})} "
                         "comparisons crossing its 95 % line by chance; a second run of the notebook tells which.")
            out.append(line)
    ttfb = ", ".join(f"{1e3 * r['ttfb_s']:.0f} ms with {name(r['workers'])}"
                     for r in sweep if not r["workers"] or r["prefetch"] == pfs[0])
    out.append(f"Time to the first batch (mean over passes): {ttfb}.")
    return out


def sharding(rows: list[dict]) -> list[str]:
    """Sentences on the lab's per-rank rows (`runs.rows`): one pass per rank and way."""
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    out = []
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        once = all(r["exactly_once"] for r in mine)
        out.append(f"{mode}: samples per rank " + ", ".join(str(r["samples"]) for r in mine) + "; "
                   + ("every sample read exactly once." if once else "NOT every sample exactly once."))
    if len(modes) == 2:
        mean = {m: [r for r in rows if r["mode"] == m] for m in modes}
        avg = {m: {"samples_per_s": sum(r["samples_per_s"] for r in rs) / len(rs),   # ranks independent:
                   "spread_per_s": combined(*(r.get("spread_per_s", NAN) for r in rs)) / len(rs)}
               for m, rs in mean.items()}
        kind = {m: "/".join(dict.fromkeys(str(r.get("format")) for r in rs)) for m, rs in mean.items()}
        a, b = avg[modes[0]], avg[modes[1]]
        names = (f"{modes[0]} ({kind[modes[0]]})", f"{modes[1]} ({kind[modes[1]]})")
        if differs(a["samples_per_s"], b["samples_per_s"], a["spread_per_s"], b["spread_per_s"]):
            line = (f"Mean per rank: {names[0]} {fmt(a['samples_per_s'], RATE)} ±{fmt(a['spread_per_s'])} vs "
                    f"{names[1]} {fmt(b['samples_per_s'], RATE)} ±{fmt(b['spread_per_s'])}: the gap "
                    f"({fmt(abs(a['samples_per_s'] - b['samples_per_s']), RATE)}) is larger than their "
                    f"within-pass intervals combined (±{fmt(combined(a['spread_per_s'], b['spread_per_s']))}), "
                    "but each rank read one pass per way, so the spread between passes (which section 2's "
                    f"± over passes includes) is not measured here: {INCONCLUSIVE}, not decided by one pass.")
        else:
            line = ("Mean per rank: " + _compare_rates(*names[:1], a, names[1], b, what="batches per rank")
                    + " (The ± here is within one pass per rank, narrower than the spread between passes.)")
        if kind[modes[0]] != kind[modes[1]]:
            line += (f" The two read different formats ({kind[modes[0]]} vs {kind[modes[1]]}), so this "
                     "gap mixes the format with the way of sharding: it is no verdict on sharding "
                     "(the format alone: section 2's single-process rows).")
        out.append(line)
    return out


def staging(staged: dict) -> list[str]:
    """Sentences on `bench.stage`: the copy, cold passes from each place, the break-even."""
    c = staged["copy"]
    out = [f"Copy: {c['mb']:.2f} MB (apparent size) in {c['seconds']:.2f} s ({c['src']} -> {c['dst']}).",
           "Cold passes: " + _compare_rates("local", staged["local"], "shared", staged["shared"])]
    if c["same_device"]:
        out.append("Both folders are on the SAME device here: whatever gap the line above shows is "
                   "not staging's doing, and no break-even can be computed.")
    else:
        be = staged["break_even_epochs"]
        out.append(f"Staging pays off after {be:.1f} epochs (copy time / seconds saved per pass)." if be else
                   "Staging never pays off here: the local pass was not faster than the shared one.")
    return out
