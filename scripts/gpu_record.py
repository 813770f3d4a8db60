"""The verification record of `make gpu-check` (scripts/gpu_check.py): one Result per lab or
notebook, written as docs/verified/<date>-<host>.md and .json, and the README line that links it.

Several checks run side by side (`gpu_check.py --only REGEX`), or again after a fix, are merged
into one record, with the GPU measurements of bench/ (their --json files) beside it:

    python scripts/gpu_record.py merge --out docs/verified first.json second.json \
        --measurement m_tta16.json --measurement m_zero.json --note "..."

A later record's row replaces an earlier one of the same name (its detail says so).
`--notebook PATH` adds a row read from an executed notebook (pass when every code cell ran and
none raised), for a check that was stopped before it could print its own row.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpu_measurements import render_measurements

README_MARK = "**Last verified on a GPU:**"
PACKAGES = ("torch", "torchvision", "deepspeed", "horovod", "papermill", "nbclient", "ipykernel")


@dataclass
class Result:
    name: str
    kind: str                      # 'lab' | 'notebook'
    status: str                    # 'pass' | 'fail' | 'not run: <why>'
    minutes: float = 0.0
    numbers: dict = field(default_factory=dict)
    detail: str = ""


def render_markdown(info: dict, results: list[Result], measurements=(), notes=()) -> str:
    """The verification record as Markdown (facts, versions, one row per lab/notebook)."""
    counts = summary(results)
    lines = [f"# GPU verification: {info['host']}, {info['date']}", "",
             f"{counts}. Written by `make gpu-check` (scripts/gpu_check.py).", "",
             "| fact | value |", "|---|---|"]
    gpus = gpus_text(info)
    python = f"{info.get('python')} ({info.get('python_path')})"
    for key, value in (("GPUs", gpus), ("compute capability", info.get("capability")),
                       ("driver", info.get("driver")), ("CUDA (torch)", info.get("cuda")),
                       ("NCCL", info.get("nccl")), ("python", python),
                       *((k, info.get(k) or "not installed") for k in PACKAGES)):
        lines.append(f"| {key} | {value} |")
    lines += ["", "| lab / notebook | result | minutes | key numbers | detail |",
              "|---|---|---|---|---|"]
    for r in results:
        nums = ", ".join(f"{k}={v}" for k, v in r.numbers.items()) or "-"
        detail = " ".join(r.detail.replace("|", "/").split())      # one table row: one line
        lines.append(f"| {r.kind} `{r.name}` | {r.status} | {r.minutes:.1f} | {nums} | "
                     f"{detail or '-'} |")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    if measurements:
        lines += ["", render_measurements(list(measurements))]
    return "\n".join(lines) + "\n"


def machine(facts: dict) -> str:
    """'1 x NVIDIA H100 80GB HBM3': the GPUs of one check."""
    return f"{facts.get('gpus')} x {', '.join(sorted(set(facts.get('gpu_names') or ['?'])))}"


def gpus_text(info: dict) -> str:
    """The GPUs fact: one machine, or each machine a merged record's checks ran on, with its date."""
    machines = info.get("machines") or []
    if len({m["gpus"] for m in machines}) < 2:
        return machine(info)
    return "; ".join(f"{m['gpus']} (first check {m['date']})" for m in machines) + \
        " (a row run on another than the first says so in its detail)"


def summary(results: list[Result]) -> str:
    n = {s: sum(r.status == s for r in results) for s in ("pass", "fail")}
    not_run = sum(r.status.startswith("not run") for r in results)
    return f"{n['pass']} pass, {n['fail']} fail, {not_run} not run"


def write_record(info: dict, results: list[Result], out_dir: Path, measurements=(),
                 notes=()) -> tuple[Path, Path]:
    """docs/verified/<date>-<host>.md and .json; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    host = re.sub(r"[^\w.-]+", "_", info["host"])
    stem = out_dir / f"{info['date'][:10]}-{host}"
    md, js = stem.with_suffix(".md"), stem.with_suffix(".json")
    md.write_text(render_markdown(info, results, measurements, notes))
    js.write_text(json.dumps({"facts": info, "results": [asdict(r) for r in results],
                              "measurements": list(measurements), "notes": list(notes)}, indent=1))
    return md, js


def update_readme(readme: Path, record: Path, info: dict, results: list[Result]) -> bool:
    """Point the README's "Last verified on a GPU" line at `record`; False if the line is absent."""
    text = readme.read_text()
    rel = os.path.relpath(record, readme.parent)
    gpus = " and ".join(dict.fromkeys(m["gpus"] for m in info.get("machines") or [])) \
        or machine(info)
    line = (f"{README_MARK} [{info['date'][:10]}, {info['host']}, {gpus}]({rel}): "
            f"{summary(results)}.")
    new, n = re.subn(rf"^{re.escape(README_MARK)}.*$", line, text, count=1, flags=re.M)
    if n:
        readme.write_text(new)
    return bool(n)


def load(path: Path) -> tuple[dict, list[Result]]:
    """(facts, results) of a record's .json."""
    data = json.loads(Path(path).read_text())
    return data["facts"], [Result(**r) for r in data["results"]]


def load_measurements(path: Path) -> list[dict]:
    """The measurements a (merged) record's .json already holds."""
    return json.loads(Path(path).read_text()).get("measurements") or []


def merge(paths) -> tuple[dict, list[Result]]:
    """One record from several: facts of the first, rows in first-seen order, a later row of the
    same name replacing an earlier one (its detail says from which check it came). A check on
    another machine (other GPUs) is listed in the facts' `machines`, and each of its rows names
    that machine; a package the first check lacked is taken from the check that had it."""
    info, rows = None, {}
    for path in paths:
        facts, results = load(path)
        if info is None:
            info = {**facts, "machines": facts.get("machines")
                    or [{"gpus": machine(facts), "date": facts["date"]}]}
        other = machine(facts) != machine(info)
        if other and machine(facts) not in {m["gpus"] for m in info["machines"]}:
            info["machines"].append({"gpus": machine(facts), "date": facts["date"]})
        for k in PACKAGES:
            if not info.get(k) and facts.get(k):
                info[k] = f"{facts[k]} (on {machine(facts)})" if other else facts[k]
        for r in results:
            where = f"on {machine(facts)}, {facts['date'][:16]}: " if other else ""
            if r.name in rows:
                r.detail = f"after {rows[r.name].status} in an earlier check: {where}{r.detail}"
            else:
                r.detail = where + r.detail
            r.detail = r.detail.rstrip(": ")
            rows[r.name] = r
    return info, list(rows.values())


def notebook_result(path: Path) -> Result:
    """A notebook's row from its executed copy: pass when every code cell ran and none raised."""
    nb = json.loads(Path(path).read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    ran = [c for c in code if c.get("execution_count")]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    status = "pass" if len(ran) == len(code) and not errors else "fail"
    first = (f": {errors[0].get('ename')}: {' '.join(str(errors[0].get('evalue')).split())[:300]}"
             if errors else "")
    why = (f"{len(ran)}/{len(code)} code cells ran, {len(errors)} error(s){first} "
           f"(read from the executed notebook {Path(path).name})")
    return Result(Path(path).stem, "notebook", status, 0.0, {}, why)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Merge gpu-check records (and bench/ measurements) "
                                             "into one record; point the README at it.")
    ap.add_argument("command", choices=("merge",))
    ap.add_argument("records", nargs="+", type=Path, help="records' .json, earliest first")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--notebook", action="append", type=Path, default=[],
                    help="an executed notebook whose row a stopped check did not write")
    ap.add_argument("--not-run", action="append", default=[], metavar="NAME=WHY",
                    help="a notebook no check reached: its row says 'not run: WHY'")
    ap.add_argument("--measurement", action="append", type=Path, default=[],
                    help="a bench/ script's --json output")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--readme", type=Path, default=Path(__file__).resolve().parents[1] / "README.md")
    args = ap.parse_args(argv)
    info, results = merge(args.records)
    by = {r.name: i for i, r in enumerate(results)}
    for path in args.notebook:
        row = notebook_result(path)
        if row.name in by:
            row.detail = f"after {results[by[row.name]].status}: {row.detail}"
            results[by[row.name]] = row
        else:
            results.append(row)
    for item in args.not_run:
        name, _, why = item.partition("=")
        if name not in by:
            results.append(Result(name, "notebook", f"not run: {why or 'no reason given'}"))
    measurements = [m for p in args.records for m in load_measurements(p)]
    measurements += [json.loads(p.read_text()) for p in args.measurement]
    md, _ = write_record(info, results, args.out, measurements, args.note)
    linked = update_readme(args.readme, md, info, results)
    print(f"{summary(results)}; record {md}{'' if linked else ' (README line absent)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
