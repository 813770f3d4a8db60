#!/usr/bin/env python3
"""`make gpu-check`: verify the course on a GPU node and write down what ran, with which versions.

    make gpu-check                 # the course venv
    make gpu-check PY=python3      # any Python with torch (a site module); engines it lacks: not run
    python scripts/gpu_check.py --labs-only --timeout 600

No GPU visible to this Python: one line saying so, exit 1 (never a silent pass). Else every lab of
course/labs/NN_*/ runs at `--tiny` on all GPUs of the node through dltutor.launch.run.launch
(torchrun + nccl; lab 01 one process; Horovod labs horovodrun; train_bert_ds.py once per ZeRO stage)
and every notebook in fast mode (DLTUTOR_FAST=1) with papermill, else nbclient. What lacks its
engine (DeepSpeed, Horovod, torchvision, papermill/nbclient, a kernel) is "not run: <why>", never
"pass". The record, docs/verified/<date>-<host>.md and .json, holds hardware, driver/CUDA/NCCL,
versions, per lab/notebook pass/fail/not run, minutes and key numbers (img/s, busbw, memory per
ZeRO stage); the README's "Last verified on a GPU" line is pointed at it.
Exit status: 0 when nothing failed, 1 otherwise (or no GPU), 2 when torch cannot be imported.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path

import gpu_streams
from gpu_record import PACKAGES, Result, summary, update_readme, write_record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                 # a site Python without the course installed
NEEDS = {"01_cifar10": ["torchvision"], "02_ddp": ["torchvision"], "03_horovod": ["torchvision"]}
ZERO_CONFIGS = ("zero0", "zero1", "zero2", "zero3")
NOTEBOOK_NEEDS = {"01": ["torchvision"], "02": ["torchvision"], "03": ["horovod", "torchvision"],
                  "04": ["deepspeed"]}


@dataclass
class Job:
    name: str                      # e.g. '02_ddp/train.py' or '04_deepspeed/train_bert_ds.py zero3'
    script: Path
    args: list
    nproc: int
    backend: str = "local"
    needs: list = field(default_factory=list)


def no_gpu_line(python: str = sys.executable) -> str | None:
    """None when torch sees a GPU, else the one line to print (torch missing: 'torch' in it)."""
    try:
        import torch
    except ImportError as exc:
        return f"gpu-check: {python} cannot import torch ({exc}); give PY=<a python with torch>"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return (f"gpu-check: NO GPU visible on {socket.gethostname()} (torch "
                f"{torch.__version__}, torch.cuda.is_available() is False): nothing was verified; "
                "run `make gpu-check` on a GPU node")
    return None


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def facts() -> dict:
    """Hardware, driver, CUDA/NCCL and the versions this check runs with."""
    import torch
    n = torch.cuda.device_count()
    out = dict(host=socket.gethostname(), date=_dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="minutes"), python=sys.version.split()[0], python_path=sys.executable,
        torch=torch.__version__, cuda=torch.version.cuda, gpus=n,
        gpu_names=[torch.cuda.get_device_name(i) for i in range(n)],
        capability=".".join(map(str, torch.cuda.get_device_capability(0))))
    try:
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # noqa: BLE001 - a fact, not a failure
        out["nccl"] = f"unknown ({type(exc).__name__})"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        out["driver"] = smi.stdout.split("\n")[0].strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        out["driver"] = "unknown (no nvidia-smi)"
    out.update({pkg: version(pkg) for pkg in PACKAGES if pkg != "torch"})
    return out


def missing(needs) -> list[str]:
    return [m for m in needs if util.find_spec(m) is None]


def course_dir(name: str) -> Path:
    from dltutor.core.course import course_root
    return course_root() / name


def lab_jobs(gpus: int) -> list[Job]:
    """Every lab script of course/labs/NN_*/ at --tiny on `gpus` ranks (lab 01: one process)."""
    jobs = []
    for script in sorted(course_dir("labs").glob("[0-9][0-9]_*/*.py")):
        folder, text = script.parent.name, script.read_text(errors="replace")
        needs = list(NEEDS.get(folder, []))
        needs += [e for e in ("deepspeed", "horovod") if re.search(rf"^\s*import {e}\b", text, re.M)]
        name = f"{folder}/{script.name}"
        if folder.startswith("01_"):
            jobs.append(Job(name, script, ["--tiny"], 1, "python", needs))
        elif "horovod" in needs:
            jobs.append(Job(name, script, ["--tiny"], gpus, "horovod", needs))
        elif script.name == "train_bert_ds.py":
            jobs += [Job(f"{name} {c}", script, ["--tiny", "--deepspeed_config",
                                                 str(script.parent / "configs" / f"{c}.json")],
                         gpus, "local", needs) for c in ZERO_CONFIGS]
        else:
            jobs.append(Job(name, script, ["--tiny"], gpus, "local", needs))
    return jobs


def key_numbers(metrics: list[dict]) -> dict:
    """img/s, busbw, memory and data label from a lab's DLTUTOR_METRICS lines (rank 0 first)."""
    if not metrics:
        return {}
    m0, out = metrics[0], {}
    if "img_sec_per_worker" in m0:
        out["img_per_s"] = round(sum(m.get("img_sec_per_worker", 0) for m in metrics), 1)
    elif m0.get("global_img_per_s") or m0.get("img_per_s"):
        out["img_per_s"] = round(m0.get("global_img_per_s") or m0["img_per_s"], 1)
    if m0.get("samples_per_s"):
        out["samples_per_s"] = round(m0["samples_per_s"], 1)
    busbw = [r.get("busbw_GBps") for m in metrics for r in m.get("results", []) or []
             if isinstance(r, dict) and r.get("busbw_GBps")]
    if busbw:
        out["busbw_GBps_max"] = round(max(busbw), 2)
    held = (m0.get("model_state_bytes") or {}).get("total")
    if held:
        out["model_states_MiB"] = round(held / 2**20, 1)
    if m0.get("max_memory_allocated"):
        out["gpu_peak_MiB"] = round(m0["max_memory_allocated"] / 2**20, 1)
    for key in ("stage", "dtype", "hardware", "data"):
        if m0.get(key) is not None:
            out[key] = m0[key]
    return out


def run_lab(job: Job, timeout: float, log_root: Path) -> Result:
    gone = missing(job.needs)
    if gone:
        return Result(job.name, "lab", f"not run: {', '.join(gone)} missing")
    try:
        from dltutor.core.engines import engine_env
        from dltutor.launch.results import LaunchError
        from dltutor.launch.run import launch
    except ImportError as exc:   # e.g. psutil absent from a site Python
        return Result(job.name, "lab", f"not run: dltutor.launch cannot be imported ({exc})")
    env = {**engine_env(), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get(
        "PYTHONPATH")]))}
    started = time.monotonic()
    try:
        res = launch(str(job.script), nproc=job.nproc, args=job.args, backend=job.backend, env=env,
                     timeout=timeout, echo=False,
                     log_dir=log_root / re.sub(r"[^\w.-]+", "_", job.name))
    except (LaunchError, ValueError, OSError) as exc:
        return Result(job.name, "lab", "fail", (time.monotonic() - started) / 60,
                      detail=str(exc).strip().splitlines()[0][:300])
    return Result(job.name, "lab", "pass", res.wall_time / 60, key_numbers(res.metrics),
                  f"{job.nproc} rank(s), {job.backend}")


def notebook_runner(kernel: str | None):
    """(run(path, out) or None, why not, kernel name): papermill, else nbclient."""
    if util.find_spec("papermill") is None and util.find_spec("nbclient") is None:
        return None, "not run: papermill and nbclient missing", None
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        specs = KernelSpecManager().find_kernel_specs()
    except ImportError:
        specs = {}
    kernel = kernel or ("dltutor" if "dltutor" in specs else "python3")
    if kernel not in specs and not (kernel == "python3" and util.find_spec("ipykernel")):
        return None, f"not run: no Jupyter kernel {kernel!r} (ipykernel missing)", None
    if util.find_spec("papermill"):
        import papermill

        def run(path, out, timeout):
            papermill.execute_notebook(str(path), str(out), kernel_name=kernel, cwd=str(path.parent),
                                       progress_bar=False, execution_timeout=int(timeout))
    else:
        import nbclient
        import nbformat

        def run(path, out, timeout):
            nb = nbformat.read(path, as_version=4)
            nbclient.NotebookClient(nb, kernel_name=kernel, timeout=int(timeout), resources={
                "metadata": {"path": str(path.parent)}}).execute()
            nbformat.write(nb, out)
    return run, "", kernel


def run_notebooks(kernel, timeout: float, log_root: Path, wanted=lambda name: True,
                  late=lambda: None):
    """Each notebook's Result as soon as it has run (a check stopped later keeps the lines)."""
    runner, why, kernel = notebook_runner(kernel)
    books = [b for b in sorted(course_dir("notebooks").glob("[0-9][0-9]_*.ipynb")) if wanted(b.stem)]
    if runner is None:
        yield from (Result(b.stem, "notebook", why) for b in books)
        return
    os.environ["DLTUTOR_FAST"] = "1"          # the kernel inherits it: fast mode
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    for book in books:
        if late():
            yield Result(book.stem, "notebook", late())
            continue
        gone = missing(NOTEBOOK_NEEDS.get(book.name[:2], []))
        if gone:
            yield Result(book.stem, "notebook", f"not run: {', '.join(gone)} missing")
            continue
        started = time.monotonic()
        try:
            runner(book, log_root / book.name, timeout)
            status, detail = "pass", f"fast mode, kernel {kernel}"
        except Exception as exc:  # noqa: BLE001 - any failure of the notebook is its result
            status, detail = "fail", failure_detail(exc)
        yield Result(book.stem, "notebook", status, (time.monotonic() - started) / 60,
                     detail=detail)


def failure_detail(exc) -> str:
    """One line: the cell's own exception (papermill's ename/evalue and cell number), else the
    exception itself."""
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:
        cell = getattr(exc, "exec_count", None)
        where = f"cell In [{cell}]: " if cell is not None else ""
        return f"{where}{ename}: {' '.join(str(evalue).split())[:300]}"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "verified", help="record folder")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per lab / notebook")
    ap.add_argument("--kernel", default=None, help="Jupyter kernel (default: dltutor, else python3)")
    ap.add_argument("--labs-only", action="store_true")
    ap.add_argument("--notebooks-only", action="store_true")
    ap.add_argument("--only", default=None, metavar="REGEX",
                    help="run only the labs/notebooks whose name matches (e.g. '^0[1-4]')")
    ap.add_argument("--streams", type=int, default=1,
                    help="run the labs and notebooks in N checks side by side, one record")
    ap.add_argument("--measure", default="", metavar="NAMES",
                    help="first run these bench/ measurements alone on the GPU, comma-separated "
                         f"(known: {', '.join(gpu_streams.MEASUREMENTS)}); into the record")
    ap.add_argument("--deadline", type=float, default=None, metavar="SECONDS",
                    help="nothing starts later than this many seconds after the check began")
    ap.add_argument("--grace", type=float, default=None, metavar="SECONDS",
                    help="with --streams: stop what still runs this long after the deadline "
                         "(default: --timeout)")
    ap.add_argument("--measure-cpus", default=None, metavar="LIST",
                    help="CPU cores the measurements run on, e.g. 0-3 (the rest left to a build)")
    ap.add_argument("--measure-timeout", type=float, default=None, metavar="SECONDS",
                    help="seconds per measurement (default: --timeout)")
    ap.add_argument("--wait-pid", type=int, default=None, metavar="PID",
                    help="after the measurements, wait for this process (an engine's build) "
                         "before the labs and notebooks, --wait-max seconds or the deadline at most")
    ap.add_argument("--wait-max", type=float, default=300.0, metavar="SECONDS")
    ap.add_argument("--note", action="append", default=[], help="a note for the record")
    ap.add_argument("--no-readme", action="store_true", help="leave the README's line alone")
    args = ap.parse_args(argv)
    started = time.monotonic()
    wanted = re.compile(args.only).search if args.only else (lambda name: True)
    why = no_gpu_line()
    if why:
        print(why, flush=True)
        return 2 if "cannot import torch" in why else 1
    info = facts()
    print(f"gpu-check on {info['host']}: {info['gpus']} x {info['gpu_names'][0]}, driver "
          f"{info['driver']}, CUDA {info['cuda']}, python {info['python']}, torch {info['torch']}, "
          f"deepspeed {info['deepspeed']}, horovod {info['horovod']}", flush=True)
    log_root = Path(os.environ.get("TMPDIR", "/tmp")) / f"dltutor-gpu-check-{os.getpid()}"
    log_root.mkdir(parents=True, exist_ok=True)
    print(f"logs and executed notebooks: {log_root}", flush=True)
    measurements, results = [], []
    if args.measure:
        measurements, results = gpu_streams.measure(args.measure.split(","), log_root,
                                                    args.measure_timeout or args.timeout,
                                                    cpus=gpu_streams.cpu_list(args.measure_cpus))
    deadline = None if args.deadline is None else started + args.deadline
    if args.wait_pid:
        gpu_streams.wait_for_pid(args.wait_pid, min(deadline or float("inf"),
                                                    time.monotonic() + args.wait_max))
        info.update({pkg: version(pkg) for pkg in PACKAGES if pkg != "torch"})  # e.g. Horovod built
    if args.streams > 1:
        results += streamed(args, info, wanted, log_root, deadline)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # a stopped stream cleans up
        results += checked(args, info, wanted, log_root, deadline,
                           on_row=lambda rows: args.no_readme and write_record(
                               info, results + rows, args.out, measurements, args.note))
    md, _ = write_record(info, results, args.out, measurements, args.note)
    linked = args.no_readme or update_readme(ROOT / "README.md", md, info, results)
    print(f"gpu-check: {summary(results)}; record {md}{'' if linked else ' (README line absent)'}")
    return 1 if any(r.status == "fail" for r in results) else 0


def late_reason(deadline, seconds):
    """A callable: None while the deadline has not passed, else the row's 'not run' status."""
    def late():
        if deadline is not None and time.monotonic() > deadline:
            return f"not run: the check's deadline ({seconds:.0f} s) passed before it started"
        return None
    return late


def checked(args, info, wanted, log_root, deadline, on_row=lambda rows: None) -> list[Result]:
    """Every wanted lab, then notebook, one after the other (each printed, and passed to
    `on_row(rows so far)`, as it ends: a stream's record is on disk before it is stopped)."""
    late, results = late_reason(deadline, args.deadline or 0), []
    if not args.notebooks_only:
        for job in (j for j in lab_jobs(info["gpus"]) if wanted(j.name)):
            results.append(Result(job.name, "lab", late()) if late()
                           else run_lab(job, args.timeout, log_root))
            print(f"  lab {job.name}: {results[-1].status} {results[-1].detail}", flush=True)
            on_row(results)
    if not args.labs_only:
        for r in run_notebooks(args.kernel, args.timeout, log_root, wanted, late):
            results.append(r)
            print(f"  notebook {r.name}: {r.status} {r.detail}", flush=True)
            on_row(results)
    return results


def streamed(args, info, wanted, log_root, deadline) -> list[Result]:
    """The same labs and notebooks in `args.streams` child checks side by side (gpu_streams)."""
    from gpu_record import load
    names = [] if args.notebooks_only else [j.name for j in lab_jobs(info["gpus"]) if wanted(j.name)]
    if not args.labs_only:
        names += [b.stem for b in sorted(course_dir("notebooks").glob("[0-9][0-9]_*.ipynb"))
                  if wanted(b.stem)]
    plan = gpu_streams.plan_streams(names, args.streams, gpu_streams.past_minutes())
    left = (deadline - time.monotonic()) if deadline is not None else 10 * 24 * 3600
    extra = ["--kernel", args.kernel] if args.kernel else []
    outs = [log_root / f"stream-{k}" for k in range(len(plan))]
    cmds = [gpu_streams.child_command(p, o, left, args.timeout, extra) for p, o in zip(plan, outs)]
    for k, p in enumerate(plan):
        print(f"  stream {k}: {', '.join(p)}", flush=True)
    grace = args.timeout if args.grace is None else args.grace
    codes = gpu_streams.run_children(cmds, left + grace, log_root)
    rows = gpu_streams.stream_results(plan, outs, codes, Result, load)
    for r in rows:
        print(f"  {r.kind} {r.name}: {r.status} {r.detail}", flush=True)
    return rows

if __name__ == "__main__":
    sys.exit(main())
