"""The verification record of `make gpu-check` (scripts/gpu_check.py): one Result per lab or
notebook, written as docs/verified/<date>-<host>.md and .json, and the README line that links it.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

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


def render_markdown(info: dict, results: list[Result]) -> str:
    """The verification record as Markdown (facts, versions, one row per lab/notebook)."""
    counts = summary(results)
    lines = [f"# GPU verification: {info['host']}, {info['date']}", "",
             f"{counts}. Written by `make gpu-check` (scripts/gpu_check.py).", "",
             "| fact | value |", "|---|---|"]
    gpus = f"{info.get('gpus')} x {', '.join(sorted(set(info.get('gpu_names') or [])))}"
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
        lines.append(f"| {r.kind} `{r.name}` | {r.status} | {r.minutes:.1f} | {nums} | "
                     f"{r.detail.replace('|', '/') or '-'} |")
    return "\n".join(lines) + "\n"


def summary(results: list[Result]) -> str:
    n = {s: sum(r.status == s for r in results) for s in ("pass", "fail")}
    not_run = sum(r.status.startswith("not run") for r in results)
    return f"{n['pass']} pass, {n['fail']} fail, {not_run} not run"


def write_record(info: dict, results: list[Result], out_dir: Path) -> tuple[Path, Path]:
    """docs/verified/<date>-<host>.md and .json; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    host = re.sub(r"[^\w.-]+", "_", info["host"])
    stem = out_dir / f"{info['date'][:10]}-{host}"
    md, js = stem.with_suffix(".md"), stem.with_suffix(".json")
    md.write_text(render_markdown(info, results))
    js.write_text(json.dumps({"facts": info, "results": [asdict(r) for r in results]}, indent=1))
    return md, js


def update_readme(readme: Path, record: Path, info: dict, results: list[Result]) -> bool:
    """Point the README's "Last verified on a GPU" line at `record`; False if the line is absent."""
    text = readme.read_text()
    rel = os.path.relpath(record, readme.parent)
    line = (f"{README_MARK} [{info['date'][:10]}, {info['host']}, {info['gpus']} x "
            f"{(info.get('gpu_names') or ['?'])[0]}]({rel}): {summary(results)}.")
    new, n = re.subn(rf"^{re.escape(README_MARK)}.*$", line, text, count=1, flags=re.M)
    if n:
        readme.write_text(new)
    return bool(n)
