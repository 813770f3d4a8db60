"""The instructor's pre-flight: run the whole course on the target node the day before class.

    python -m dltutor preflight                    # doctor, then every notebook, full size
    python -m dltutor preflight --fast             # DLTUTOR_FAST=1: about a minute per notebook
    python -m dltutor preflight --site frontera --notebooks 02 05 --out $SCRATCH/preflight

First the doctor's table, then each notebook executed headless with its own `parameters` cell
(papermill, on the course kernel `dltutor`), then one Markdown report: the hardware and versions,
per notebook pass/fail, minutes and key numbers, and what to fix. The key numbers are the final
metrics every launch of the notebook reported (`DLTUTOR_METRICS` lines of rank 0 in the launch
logs, which the pre-flight keeps per notebook under `<out>/runs/<notebook>` via DLTUTOR_RUNS), so
they are what this node measured, not a summary written by hand. Exit status: 0 when every notebook passed and the doctor found no problem, else 1.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from dltutor import doctor as _doctor
from dltutor.core import course, device, dist, env

KERNEL = "dltutor"
KEY_WORDS = ("img", "per_s", "busbw", "algbw", "samples", "acc", "mem", "bubble", "loss", "mib", "gib")


@dataclass
class NotebookRun:
    name: str
    passed: bool
    minutes: float
    key_numbers: list = field(default_factory=list)
    error: str = ""
    output: str = ""
    launches: int = 0      # launches logged under the notebook's runs folder (with or without metrics)


def notebooks(wanted=None) -> list[Path]:
    """The course notebooks, all or those whose name starts with one of `wanted` ('02', '05_ring')."""
    found = sorted((course.course_root() / "notebooks").glob("*.ipynb"))
    if not wanted:
        return found
    chosen = [p for p in found if any(p.name.startswith(w) for w in wanted)]
    missing = [w for w in wanted if not any(p.name.startswith(w) for p in found)]
    if missing:
        names = ", ".join(p.stem for p in found)
        raise ValueError(f"no notebook starts with {', '.join(missing)}; the course has: {names}")
    return chosen


def key_numbers(since: float, runs_dir: Path, limit: int = 6) -> list[str]:
    """'script: metric=value, ...' for each launch logged after `since` (rank 0's last metrics)."""
    lines = []
    for run in sorted(p for p in runs_dir.glob("*") if p.is_dir() and p.stat().st_mtime >= since):
        log = run / "rank0.log"
        records = [r for r in map(dist.read_report, _lines(log)) if r] if log.is_file() else []
        if not records:
            continue
        numbers = {k: v for k, v in records[-1].items() if isinstance(v, (int, float))
                   and not isinstance(v, bool) and any(w in k.lower() for w in KEY_WORDS)}
        if numbers:
            script = run.name.split("-", 2)[-1].rsplit("-", 1)[0]
            shown = ", ".join(f"{k}={_short(v)}" for k, v in list(numbers.items())[:limit])
            lines.append(f"{script} (world_size {records[-1].get('world_size', '?')}): {shown}")
    return lines


def launch_count(since: float, runs_dir: Path) -> int:
    """How many launches (folders with a rank 0 log) the notebook logged after `since`."""
    return sum(1 for p in runs_dir.glob("*") if p.is_dir() and p.stat().st_mtime >= since
               and (p / "rank0.log").is_file())


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run_notebook(path: Path, out_dir: Path, timeout: int) -> NotebookRun:
    """Execute one notebook with papermill on the course kernel; never raises for a failing cell."""
    import papermill
    from papermill.exceptions import PapermillExecutionError
    output, start = out_dir / "executed" / path.name, time.time()
    runs = out_dir / "runs" / path.stem
    os.environ["DLTUTOR_RUNS"] = str(runs)   # this notebook's launches log here (the kernel inherits it)
    try:
        papermill.execute_notebook(str(path), str(output), kernel_name=KERNEL, cwd=str(path.parent),
                                   progress_bar=False, execution_timeout=timeout)
        error = ""
    except PapermillExecutionError as exc:  # papermill also counts the cells meant to raise
        error = first_real_error(output) or ""
    except Exception as exc:  # no kernel, a dead kernel, a timeout: report it, go on
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
    minutes = (time.time() - start) / 60
    numbers = key_numbers(start, runs) if runs.is_dir() else []
    return NotebookRun(path.stem, not error, minutes, numbers, error, str(output),
                       launch_count(start, runs) if runs.is_dir() else 0)


def first_real_error(executed: Path) -> str | None:
    """'cell N: Error: message' of the first failing cell of an executed notebook, or None.
    Cells tagged `raises-exception` (an exercise's self-check before it is solved) do not count."""
    import nbformat
    for cell in nbformat.read(executed, as_version=4).cells:
        if cell.cell_type != "code" or "raises-exception" in cell.metadata.get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"cell {cell.execution_count}: {out.ename}: {out.evalue}".strip()
        if cell.metadata.get("papermill", {}).get("exception"):
            return f"cell {cell.execution_count}: the cell did not finish"
    return None


def kernel_missing() -> str | None:
    """One line saying how to install the course kernel, or None when Jupyter can start it."""
    from jupyter_client.kernelspec import KernelSpecManager
    if KERNEL in KernelSpecManager().find_kernel_specs():
        return None
    return (f"the Jupyter kernel {KERNEL!r} is not installed: run "
            f"`python -m dltutor kernel install` with the course's Python, then run the pre-flight again")


def report(runs: list[NotebookRun], rows: list, site: str, fast: bool) -> str:
    """The Markdown report: where, what, per notebook, and what to fix."""
    problems = [r for r in rows if r.status == _doctor.PROBLEM]
    failed = [r for r in runs if not r.passed]
    versions = {r.name: r.value for r in rows if r.name in ("python", "torch", "horovod", "deepspeed")}
    lines = [f"# dltutor pre-flight on {socket.gethostname()}, {_dt.datetime.now():%Y-%m-%d %H:%M}", "",
             f"- hardware: {device.hardware_label()}; {platform.machine()}, "
             f"{env.cpu_cores()} usable CPU cores; GPUs: {device.gpu_count()}",
             f"- site profile: {site}; mode: {'fast (DLTUTOR_FAST=1)' if fast else 'full size'}",
             *[f"- {k}: {v}" for k, v in versions.items()],
             f"- result: {len(runs) - len(failed)} of {len(runs)} notebooks passed; "
             f"{len(problems)} doctor problem(s)", "",
             "| notebook | result | minutes | key numbers (rank 0's final metrics, from the launch logs) |",
             "|---|---|---|---|"]
    for r in runs:
        numbers = "<br>".join(r.key_numbers) or (
            f"({r.launches} launch(es); none reported a speed, accuracy or memory metric)"
            if r.launches else "(no multi-rank launch)")
        lines.append(f"| {r.name} | {'pass' if r.passed else 'FAIL'} | {r.minutes:.1f} | {numbers} |")
    lines += ["", "## What to fix", ""]
    lines += [f"- doctor, {r.name}: {r.value} -> {r.fix}" for r in problems]
    lines += [f"- {r.name} failed at {r.error}; open the executed copy {r.output} and rerun "
              "that cell to see it in context" for r in failed]
    if not problems and not failed:
        lines.append("- nothing: the course ran end to end on this node.")
    return "\n".join(lines) + "\n"


def preflight(wanted=None, site: str | None = None, fast: bool = False, out: Path | None = None,
              timeout: int = 1800) -> tuple[int, Path]:
    """Doctor, every chosen notebook, the report. Returns (exit status, report path)."""
    from dltutor.launch import sites
    chosen = notebooks(wanted)
    site = site or os.environ.get("DLTUTOR_SITE", "local")
    if site not in sites.list_sites():
        raise ValueError(f"no site profile {site!r}; choose one of {', '.join(sites.list_sites())}")
    os.environ["DLTUTOR_SITE"] = site
    if fast:
        os.environ["DLTUTOR_FAST"] = "1"   # the kernels papermill starts inherit it
    out = Path(out or env.user_dir() / "preflight" / f"{_dt.datetime.now():%Y%m%d-%H%M%S}")
    (out / "executed").mkdir(parents=True, exist_ok=True)
    rows = _doctor.doctor()
    missing = kernel_missing()
    if missing:
        raise RuntimeError(missing)
    runs = []
    for path in chosen:
        print(f"preflight: {path.stem} ...", flush=True)
        runs.append(run_notebook(path, out, timeout))
        print(f"preflight: {path.stem}: {'pass' if runs[-1].passed else 'FAIL ' + runs[-1].error}"
              f" ({runs[-1].minutes:.1f} min)", flush=True)
    target = out / f"preflight-{socket.gethostname()}.md"
    target.write_text(report(runs, rows, site, fast))
    bad = any(not r.passed for r in runs) or any(r.status == _doctor.PROBLEM for r in rows)
    print(f"preflight: report written to {target}")
    return (1 if bad else 0), target
