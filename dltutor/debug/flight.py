"""torch's Flight Recorder on gloo: record, dump from the code that caught the timeout, analyze.

With TORCH_FR_BUFFER_SIZE=N (N > 0) every process group records its last N collectives: sequence
number, op (`gloo:all_reduce`), input sizes, state and the Python stack. NCCL dumps the buffer by
itself when its watchdog times out (TORCH_NCCL_DUMP_ON_TIMEOUT=1, files under
TORCH_FR_DUMP_TEMP_FILE); gloo has no watchdog and dumps nothing, so the rank that catches the
timeout calls `dump` here. torch's analyzer (`python -m torch.distributed.flight_recorder.fr_trace
DIR -p PREFIX`, also installed as `torchfrtrace`) then matches the ranks' entries and prints which
ranks did not join which collective.

One adaptation is needed on gloo in torch 2.14.1: the dump files `pg_config` under the key '' while
its entries name the group ('0', 'default_pg'), and the analyzer stops with KeyError ('0', 0). `dump`
re-keys `pg_config` by the group's name (REKEYED says so in the notebook's output).
"""
from __future__ import annotations

import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
PREFIX = "fr_rank"
REKEYED = ("re-keyed pg_config by the group's name before torch's analyzer: on gloo (torch "
           "2.14.1) the dump files it under '' and the analyzer fails with KeyError ('0', 0)")


def recording() -> bool:
    return int(os.environ.get(BUFFER_ENV, "0") or 0) > 0


def env(size: int = 200) -> dict:
    """The ranks' variables that turn recording on."""
    return {BUFFER_ENV: str(size)}


def rekey(trace: dict) -> dict:
    """`pg_config` keyed by each group's name, as the analyzer looks it up (gloo writes '')."""
    groups = {e["process_group"] for e in trace.get("entries", []) if e.get("process_group")}
    config = dict(trace.get("pg_config") or {})
    ranks = next(iter(config.values()), {}).get("ranks", "[]") if config else "[]"
    for name, desc in groups:
        config.setdefault(name, {"name": name, "desc": desc, "ranks": ranks})
    config.pop("", None)
    return {**trace, "pg_config": config}


def dump(folder, rank: int) -> Path:
    """Write this rank's Flight Recorder buffer (re-keyed) to <folder>/fr_rank<rank>."""
    import torch
    trace = pickle.loads(torch._C._distributed_c10d._dump_fr_trace())
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PREFIX}{rank}"
    path.write_bytes(pickle.dumps(rekey(trace)))
    return path


def last_entries(folder) -> dict[int, dict]:
    """{rank: its last recorded collective (seq id, op, input sizes, state)} from the dumps."""
    out = {}
    for path in sorted(Path(folder).glob(PREFIX + "*")):
        trace = pickle.loads(path.read_bytes())
        entries = trace.get("entries") or [{}]
        e = entries[-1]
        out[int(path.name[len(PREFIX):])] = {
            "last_seq": e.get("collective_seq_id"), "op": e.get("profiling_name"),
            "input_sizes": e.get("input_sizes"), "state": e.get("state"),
            "entries": len(trace.get("entries") or []),
            "states": {st: sum(1 for x in entries if x.get("state") == st)
                       for st in {x.get("state") for x in entries}},
            "ops": {x.get("collective_seq_id"): x.get("profiling_name") for x in entries}}
    return out


def behind_and_ahead(last: dict[int, dict]) -> dict | None:
    """Where each rank stopped, from `last_entries`: the rank(s) whose last collective has the
    lowest sequence number (behind: they wait in it), the others (ahead), and what each rank ahead
    ran under that same sequence number (`there`: None when its buffer has no such entry)."""
    seqs = {r: e["last_seq"] for r, e in last.items() if e.get("last_seq") is not None}
    if len(seqs) < 2:
        return None
    low = min(seqs.values())
    behind = sorted(r for r, s in seqs.items() if s == low)
    ahead = sorted(r for r, s in seqs.items() if s > low)
    return {"seq": low, "op": last[behind[0]]["op"], "state": last[behind[0]].get("state"),
            "behind": behind, "ahead": ahead,
            "last": {r: (seqs[r], last[r]["op"]) for r in sorted(seqs)},
            "there": {r: (last[r].get("ops") or {}).get(low) for r in ahead},
            "states": states_of(last)}


def states_of(last: dict[int, dict]) -> dict:
    """How many entries of all the dumps are in each state ('scheduled', 'completed', ...)."""
    total: dict = {}
    for e in last.values():
        for st, n in (e.get("states") or {}).items():
            total[st] = total.get(st, 0) + n
    return total


def analyze(folder, timeout: float = 120.0) -> str:
    """torch's own analyzer over the dumps in `folder` (its stdout and stderr)."""
    out = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                          str(folder), "-p", PREFIX], capture_output=True, text=True,
                         timeout=timeout)
    return (out.stdout + out.stderr).strip()


def findings(text: str) -> list[dict]:
    """What the analyzer named: each collective with errors, its sequence number, the missing or
    culprit ranks and the op."""
    found = []
    for block in re.split(r"\n(?=Collective sequence number|Not all ranks joining)", text):
        seq = re.search(r"sequence number:\s*(\d+)", block)
        if not seq:
            continue
        missing = re.search(r"missing ranks:\s*\{([\d, ]*)\}", block)
        culprit = re.search(r"Culprit rank (\d+); Error type: (\w+)", block)
        op = re.search(r"collective:\s*(\S+)", block)
        ranks = ([int(r) for r in missing.group(1).split(",") if r.strip()] if missing
                 else [int(culprit.group(1))] if culprit else [])
        found.append({"seq": int(seq.group(1)), "ranks": ranks, "op": op.group(1) if op else None,
                      "kind": "missing ranks" if missing else (culprit.group(2) if culprit
                                                               else "error")})
    return found


def brief(text: str, keep=("faulty_train.py", "dltutor/debug/"), limit: int = 40) -> str:
    """The analyzer's report without the stack frames of torch, runpy and the launcher: only
    frames of the lab (`keep`) stay, so each block shows the line that called the collective."""
    out = []
    for line in text.splitlines():
        frame = re.match(r"\s*\S+ at (.+):\d+$", line)
        if frame and not any(k in frame.group(1) for k in keep):
            continue
        out.append(line)
    return "\n".join(out[:limit])
