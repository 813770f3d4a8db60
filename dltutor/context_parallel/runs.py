"""From the kernel: run lab 09's ring_attention.py on 2 and 4 ranks and turn its reports into rows.

    results = runs.run_all()                # {2: [rank reports], 4: [...]}
    runs.check_rows(results), runs.block_rows(results), runs.bytes_rows(results),
    runs.memory_rows(results), runs.time_rows(results), runs.torch_rows(results)

The kernel never joins a process group; `launch` starts the ranks (dltutor.launch.run).
"""
from __future__ import annotations

from dltutor.core import env as core_env
from dltutor.core.course import lab
from dltutor.core.device import plan_ranks
from dltutor.core.spread import mean_and_ci
from dltutor.launch.run import launch

LAB = "09_long_context/ring_attention.py"
TOLERANCE = {"float64": 1e-12, "float32": 1e-5}   # the issue's: outputs and gradients
TORCH_ONCE = ("torch's context_parallel runs in the first launch only: on the CPU DTensor "
              "searches the op's sharding strategies for ~15 s per process, and the CPU result is "
              "the same whatever the rank count")


def _flags(**kw) -> list[str]:
    out = []
    for k, v in kw.items():
        if v is None or v is False:
            continue
        name = f"--{k.replace('_', '-')}"
        out += [name] if v is True else [name, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    return out


def run_lab(nproc: int = 2, env=None, oversubscribe: bool = False, echo: bool = False,
            timeout: float = 900, **flags) -> list[dict]:
    """ring_attention.py on `nproc` ranks; every rank's report (sorted by rank). `flags` are the
    lab's, e.g. tiny=True, impl=["course", "ulysses"]."""
    result = launch(lab(LAB), nproc=nproc, args=_flags(**flags), env=env, echo=echo,
                    timeout=timeout, oversubscribe=oversubscribe)
    return result.metrics


def run_all(ranks=(2, 4), tiny: bool | None = None, echo: bool = False, **flags) -> dict:
    """The lab on each rank count (GPU node: one rank per GPU, counts above the GPUs left out;
    CPU: every count, ranks sharing the cores). tiny: default fast mode. On the CPU torch's
    implementation runs in the first launch only (TORCH_ONCE). {ranks: [rank reports]}."""
    tiny = core_env.fast_mode() if tiny is None else tiny
    plan = plan_ranks(list(ranks), need=2)
    counts = plan.ranks if plan.on_gpu else list(ranks)
    out = {}
    for i, n in enumerate(counts):
        impl = flags.get("impl") or (["course", "ulysses", "torch"] if plan.on_gpu or i == 0
                                     else ["course", "ulysses"])
        out[n] = run_lab(n, env=plan.env, oversubscribe=not plan.on_gpu, echo=echo,
                         tiny=tiny, **{**flags, "impl": impl})
    return out


def _first(results) -> list[dict]:
    return results[min(results)]


def check_rows(results: dict) -> list[dict]:
    """One row per (ranks, implementation, dtype, mask, layout): the largest error over the ranks."""
    return [{"ranks": n, "impl": "ring (course)" if c["impl"] == "course" else c["impl"],
             "dtype": c["dtype"], "mask": "causal" if c["causal"] else "none", "layout": c["layout"],
             "out err": c["out_err"], "grad err": c["grad_err"], "tolerance": TOLERANCE[c["dtype"]]}
            for n, reps in sorted(results.items()) for c in reps[0]["checks"]]


def block_rows(results: dict, dtype: str = "float32") -> list[dict]:
    """Blocks of work each rank did (causal ring), counted and by `ring.blocks_formula`."""
    rows = []
    for n, reps in sorted(results.items()):
        for rep in reps:
            for c in rep["checks"]:
                if c["impl"] == "course" and c["causal"] and c["dtype"] == dtype:
                    rows.append({"ranks": n, "layout": c["layout"], "rank": rep["rank"],
                                 "blocks": c["blocks"], "formula": c["blocks_formula"],
                                 "computed": c["blocks_computed"]})
    return rows


def bytes_rows(results: dict, dtype: str = "float32") -> list[dict]:
    """Bytes one rank sent per attention layer (the most any rank sent), ring vs Ulysses, counted
    and by each `bytes_formula`; causal, contiguous shards."""
    rows = []
    for n, reps in sorted(results.items()):
        for impl in ("course", "ulysses"):
            mine = [c for rep in reps for c in rep["checks"] if c["impl"] == impl and c["causal"]
                    and c["dtype"] == dtype and c["layout"] == "contiguous"]
            if mine:
                rows.append({"ranks": n, "impl": "ring" if impl == "course" else "ulysses",
                             "heads": reps[0]["heads"], "seq": reps[0]["seq"],
                             "forward": max(c["bytes_forward"] for c in mine),
                             "backward": max(c["bytes_backward"] for c in mine),
                             "formula forward": mine[0]["formula_forward"],
                             "formula backward": mine[0]["formula_backward"]})
    return rows


def memory_rows(results: dict) -> list[dict]:
    """Peak bytes per rank by sequence length: the whole sequence on one process (from the first
    launch), and the ring on each rank count (the largest over its ranks), beside the formula."""
    rows = [dict(r) for r in _first(results)[0]["memory"] if r["ranks"] == 1]
    for n, reps in sorted(results.items()):
        seqs = sorted({r["seq"] for rep in reps for r in rep["memory"] if r["ranks"] == n})
        for s in seqs:
            mine = [r for rep in reps for r in rep["memory"] if r["ranks"] == n and r["seq"] == s]
            rows.append(dict(max(mine, key=lambda r: r["peak_bytes"])))
    return sorted(rows, key=lambda r: (r["ranks"], r["seq"]))


def time_rows(results: dict) -> list[dict]:
    """ms of forward+backward (the slowest rank per run): mean of the runs ± its 95 % CI."""
    rows = []
    for n, reps in sorted(results.items()):
        for t in reps[0]["times"]:
            for impl, ms in t["ms"].items():
                mean, ci = mean_and_ci(ms)
                rows.append({"ranks": n, "mask": "causal" if t["causal"] else "none", "impl": impl,
                             "ms": mean, "±": ci, "fastest": min(ms), "runs": len(ms),
                             "hardware": reps[0]["hardware"], "shape": _shape(reps[0])})
    return rows


def _shape(rep: dict) -> str:
    """The timed problem, in words (forward+backward, fp32)."""
    return (f"batch {rep['batch']}, {rep['heads']} heads, sequence {rep['seq']:,}, head_dim "
            f"{rep['head_dim']}, float32, forward+backward")


def torch_rows(results: dict) -> list[dict]:
    """What torch's context_parallel did in each launch that ran it (see torch_cp.describe)."""
    return [{"ranks": n, **r} for n, reps in sorted(results.items()) for r in reps[0]["torch"]]
