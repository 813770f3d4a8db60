"""From the kernel: run lab 06's two scripts on N ranks and turn their reports into tables.

The kernel never joins a process group; `launch` starts the ranks (see dltutor.launch.run).
"""
from __future__ import annotations

import statistics

from dltutor.core.course import lab
from dltutor.core.device import plan_ranks
from dltutor.core.env import cpu_cores
from dltutor.core.spread import mean_and_ci
from dltutor.launch.run import launch
from dltutor.model_parallel.load import load1
from dltutor.model_parallel.pipeline import bubble_formula

TP_LAB, PP_LAB = "06_model_parallel/tp_mlp.py", "06_model_parallel/pipeline.py"


def _flags(**kw) -> list[str]:
    out = []
    for k, v in kw.items():
        if v is None:
            continue
        if v is True:
            out.append(f"--{k.replace('_', '-')}")
        else:
            out += [f"--{k.replace('_', '-')}", ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    return out


def rank_plan(wanted) -> tuple[list, dict, bool, str]:
    """(rank counts, launch env, oversubscribe, note) for this node. GPU node (>= 2 GPUs): one
    rank per GPU, counts above the GPU count left out. CPU node: every count runs, more ranks
    than cores sharing them on purpose -- the checks are exact whatever shares a core, and the
    pipeline's SLEEP stand-in needs no core; only the real-compute timings would suffer."""
    plan = plan_ranks(wanted, need=2)
    if plan.on_gpu:
        return plan.ranks, plan.env, False, plan.note
    wanted = [wanted] if isinstance(wanted, int) else list(wanted)
    crowded = [n for n in wanted if n > cpu_cores()]
    notes = ["NOTE: fewer than 2 GPUs here: the runs use the CPU with gloo (GPUs hidden)."
             if plan.env else "",
             f"NOTE: {crowded} rank(s) on {cpu_cores()} core(s) share them on purpose." if crowded else ""]
    return wanted, plan.env, True, " ".join(x for x in notes if x)


def run_tp(nproc: int = 2, env=None, oversubscribe: bool = False, echo: bool = False,
           timeout: float = 900, **flags) -> dict:
    """tp_mlp.py on `nproc` ranks; rank 0's report (every rank checks the same things).
    `flags` are the lab's, e.g. tiny=True; `env`/`oversubscribe` as `rank_plan` gives them.
    `load` = the 1-minute load average before and after the launch (`load.load1`)."""
    before = load1()
    result = launch(lab(TP_LAB), nproc=nproc, args=_flags(**flags), env=env, echo=echo,
                    timeout=timeout, oversubscribe=oversubscribe)
    return {**result.metrics[0], "load": (before, load1())}


def run_pipeline(nproc: int = 2, env=None, oversubscribe: bool = False, echo: bool = False,
                 timeout: float = 900, **flags) -> dict:
    """pipeline.py on `nproc` stages: rank 0's timings with the last stage's loss checks, and
    `load`, the 1-minute load average before and after the launch."""
    before = load1()
    result = launch(lab(PP_LAB), nproc=nproc, args=_flags(**flags), env=env, echo=echo,
                    timeout=timeout, oversubscribe=oversubscribe)
    first, last = result.metrics[0], result.metrics[-1]
    return {**first, "checks": last["checks"], "load": (before, load1())}


def _rel(err: float, scale) -> float:
    """An error relative to the reference's largest |value| (fp32 rounding is relative)."""
    return err / scale if scale else err


def tp_rows(report: dict) -> list[dict]:
    """One row per block: the checks as errors RELATIVE to the whole block's largest value (output,
    input gradient, parameter gradients), the all-reduces and the size of the tensor each one
    reduced beside the formula, and the times: `ms whole` (one process alone, `whole threads`
    threads) and `ms split` (t ranks) the means of `runs` alternated pairs, `split - whole` the
    mean of each pair's difference with its paired 95 % CI (`dltutor.core.spread`; nan with one)."""
    n = report["world_size"]
    rows = []
    for b in report["blocks"]:
        out_s, dx_s, g_s = (b.get(k) or 1.0 for k in ("out_scale", "dx_scale", "grad_scale"))
        rows.append({
            "ranks": n, "block": b["block"], "out err": _rel(b["out_err"], out_s),
            "dx err": _rel(b.get("dx_err", 0.0), dx_s), "grad err": _rel(b["grad_err"], g_s),
            "DTensor err": max(_rel(b["dtensor_out_err"], out_s), _rel(b["dtensor_grad_err"], g_s)),
            "ours vs DTensor": b.get("scratch_vs_dtensor_rel",
                                     _rel(b["scratch_vs_dtensor_err"], min(out_s, dx_s, g_s))),
            "all-reduces fwd/bwd": f"{b['allreduce_forward']}/{b['allreduce_backward']}",
            "DTensor fwd/bwd": f"{b['dtensor_collectives']['forward']}/"
                               f"{b['dtensor_collectives']['backward']}",
            "bytes each": b["bytes_forward"], "formula bytes": b["formula_bytes"],
            "params/rank": b["params_per_rank"], "params whole": b["params_full"],
            **_times(b), "runs": b.get("timed_runs", 1), "whole threads": b.get("whole_threads", 1),
            "cores": b.get("cores")})
    return rows


def tp_table(rows: list[dict]) -> list[dict]:
    """`tp_rows` for show_table: the per-pair list left out (its median and sign count stay)."""
    return [{k: v for k, v in r.items() if k != "pairs"} for r in rows]


TP_HEADERS = {"out err": "out err (rel)", "dx err": "dx err (rel)", "grad err": "grad err (rel)",
              "DTensor err": "DTensor err (rel)", "ours vs DTensor": "ours vs DTensor (rel)",
              "bytes each": "tensor bytes each", "ms whole": "ms whole (1 process)",
              "± paired": "± (paired)"}
"""Headers for `tp_rows` in a table."""


def _times(block: dict) -> dict:
    """A block's mean whole and split times (ms) over the lab's runs, each with its 95 % CI, and
    the mean of the paired differences (split - whole, run i of each) with ITS 95 % CI."""
    out = {}
    runs = {form: block.get(f"ms_{form}_runs") or [block[f"ms_{form}"]] for form in ("whole", "split")}
    for form, xs in runs.items():
        mean, ci = mean_and_ci(xs)
        out.update({f"ms {form}": mean, f"± {form}": ci})
    diffs = [s - w for w, s in zip(runs["whole"], runs["split"])]
    out["split - whole"], out["± paired"] = mean_and_ci(diffs)
    out["median split - whole"] = statistics.median(diffs)
    out["split faster (pairs)"] = f"{sum(d < 0 for d in diffs)}/{len(diffs)}"
    out["pairs"] = list(zip(runs["whole"], runs["split"]))
    return out


def paired_text(block: dict) -> str:
    """A block's split - whole, paired, with its interval and verdict, for a table cell."""
    t = _times(block)
    d, c = t["split - whole"], t["± paired"]
    said = "inconclusive here" if c != c or abs(d) <= c else ("split faster" if d < 0 else "split slower")
    return f"split - whole {d:.1f} ± {c:.1f} ms (paired 95 % CI): {said}"


BUBBLE_HEADERS = {"measured": "measured (mean of steps)", "spread": "± (95 % CI)",
                  "step ms": "step ms (mean)", "max in flight": "max in flight (median step)",
                  "overlap": "both computing (share)", "idle": "none computing (share)"}
"""Headers for `bubble_rows` in a table: what the measured value and its ± are."""


def bubble_rows(report: dict) -> list[dict]:
    """One row per (schedule, m): the mean bubble over the timed steps (the lab's warm-up step
    left out), `spread` = the 95 % confidence interval of that mean (`dltutor.core.spread`; nan
    with one step: no interval), the formula, the mean step time, the mean share of the step when
    two or more stages computed at once (`overlap`) and when none did (`idle`), and the most
    micro-batches a stage held (in the median-bubble step). `bubbles`/`steps ms` keep every step
    (the schedules ran interleaved, step i of each a pair; `m in rounds`: every m ran in the same
    rounds too, so step i of two m's is a pair as well)."""
    out = []
    for r in report["runs"]:
        mean, ci = mean_and_ci(r.get("bubbles") or [r["bubble"]])   # = _mean_bubble(r)
        steps = [s * 1e3 for s in r.get("steps_s") or [r["step_s"]]]
        per = r.get("steps_mean_s") or ([r["mean_s"]] if "mean_s" in r else [])
        out.append({"stages": r["stages"], "schedule": r["schedule"], "m": r["m"], "measured": mean,
                    "spread": ci, "formula": r["formula"], "difference": mean - r["formula"],
                    "step ms": mean_and_ci(steps)[0], "max in flight": max(r["in_flight"]),
                    "overlap": mean_and_ci(r.get("overlaps") or [float("nan")])[0],
                    "idle": mean_and_ci(r.get("idles") or [float("nan")])[0],
                    "bubbles": list(r.get("bubbles") or [r["bubble"]]), "steps ms": steps,
                    "m in rounds": bool(r.get("m_in_rounds")),
                    **{f"{k} ms": 1e3 * mean_and_ci([t[k] for t in per])[0] if per else float("nan")
                       for k in "FB"}})
    return out


def bubble_table(rows: list[dict]) -> list[dict]:
    """`bubble_rows` for show_table: the per-step lists left out."""
    return [{k: v for k, v in r.items() if k not in ("bubbles", "steps ms", "F ms", "B ms", "m in rounds")}
            for r in rows]


def _mean_bubble(run: dict) -> float:
    """A (schedule, m) run's bubble as the tables show it: the mean over its timed steps."""
    return mean_and_ci(run.get("bubbles") or [run["bubble"]])[0]


CHECK_HEADERS = {"loss_err": "loss err (abs)", "grad_err": "max grad err (abs)"}
"""Headers for `check_rows`: both errors are absolute differences from the whole model."""


def check_rows(report: dict, tolerance: float = 1e-5) -> list[dict]:
    """The schedules' checks against the whole model, absolute errors, and whether the loss error is
    within `tolerance` (a CHOSEN fp32 threshold) relative to the whole model's loss."""
    return [{"stages": report["world_size"], **c,
             "loss within (chosen)": f"{tolerance:g} x |loss|: "
                                     + ("yes" if c["loss_err"] is not None
                                        and c["loss_err"] <= tolerance * abs(c["ref_loss"]) else "NO")}
            for c in report["checks"]]


def measured_bytes(tp: dict, pp: dict | None = None) -> list[dict]:
    """Bytes each form would move per step for ONE model, the TP lab's two blocks on its batch
    (tokens = batch x seq, fp32), so the rows compare forms, not model sizes. `bytes per step`
    counts the tensors a form communicates, each once (an all-reduce of a tensor counts its
    size); `sent per rank (ring)` is what one rank sends with a ring all-reduce, 2(n-1)/n of it,
    as section 3's reference table counts.

    TP: the two all-reduces of each block (counted by the layers in the run); PP (derived, not run
    on these blocks): the two blocks as two stages, one activation forward and one gradient back
    across the cut per step, whatever m (the micro-batches split the same batch); DP (not run
    here): one all-reduce of the blocks' gradients, params x 4 B. `pp` is not needed: section 2's
    pipeline ran another, smaller model (`pipeline_lab_bytes` says what its cut carried).
    """
    n = tp["world_size"]
    tp_bytes = sum(b["bytes_forward"] + b["bytes_backward"] for b in tp["blocks"])
    params = sum(b["params_full"] for b in tp["blocks"])
    tokens, width = tp["batch"] * tp["seq"], tp["d_model"]
    act = tokens * width * 4
    ring = 2 * (n - 1) / n if n > 1 else 0.0
    return [
        {"form": "tensor (TP)", "kind": "counted", "what moves": "activations, all-reduce",
         "when": "every block, fwd and bwd",
         "bytes per step": tp_bytes, "sent per rank (ring)": ring * tp_bytes,
         "source": f"counted, {n} ranks, tp_mlp.py; a ring sends 2(t-1)/t of each tensor per rank"},
        {"form": "pipeline (PP)", "kind": "derived from shapes", "what moves": "activations, point-to-point",
         "when": "every micro-batch at each stage boundary", "bytes per step": 2 * act,
         "sent per rank (ring)": 2 * act,
         "source": f"mlp | attention as 2 stages: 2 x {tokens} tokens x {width} x 4 B, any m"},
        {"form": "data (DP)", "kind": "formula only (not run)", "what moves": "gradients, all-reduce",
         "when": "once per step", "bytes per step": params * 4, "sent per rank (ring)": ring * params * 4,
         "source": f"the {params:,} parameters of the same blocks x 4 B (a ring of {n} sends "
                   f"2(n-1)/n of it per rank)"},
    ]


def pipeline_lab_bytes(pp: dict) -> str:
    """What section 2's pipeline (its own, smaller model) sent across one stage boundary per step."""
    m = max(r["m"] for r in pp["runs"])
    act = pp["mb_size"] * pp["d_model"] * 4
    return (f"Section 2's pipeline ran another, smaller model: at m={m} one stage boundary carried "
            f"2 x {m} x {pp['mb_size']} x {pp['d_model']} x 4 B = {2 * m * act:,} B per step "
            "(derived from its shapes) -- not comparable with the rows above, which use one model.")


# seed 003's slide 19 ("Strategy Comparison"), its words, for the two rows this table keeps
SEED_003 = {"data": ("Input data (batch).", "When model fits in one GPU but data is large."),
            "model (pipeline)": ("Model layers.", "When model is too big for a single GPU."),
            "tensor": ("Tensor computations inside a layer.",
                       "When even one layer is too large for one device.")}
ADAPTED = ("adapted from seed 003: its 'what is split' and 'when to use' rows (its words), as "
           "columns; its 'basic idea', 'scalability' and 'implementation' rows dropped; "
           "'kind' and 'this notebook' added")


def strategy_table(tp: dict, pp: dict, dp_scaling: str = "see notebook 02") -> list[dict]:
    """Seed 003's strategy comparison (ADAPTED says how), beside what this notebook ran; `kind`
    says per row whether the entry was measured here or not run here at all."""
    mlp = next(b for b in tp["blocks"] if b["block"] == "mlp")
    gpipe = [r for r in pp["runs"] if r["schedule"] == "gpipe"] or pp["runs"]
    best, worst = max(gpipe, key=lambda r: r["m"]), min(gpipe, key=lambda r: r["m"])
    p = pp["world_size"]
    ours = {
        "data": ("not run here", f"gradient all-reduce once per step; measured in {dp_scaling}"),
        "model (pipeline)": (
            f"measured ({pp['work']})",
            f"{worst['schedule']} bubble {_mean_bubble(worst):.2f} at m={worst['m']} -> "
            f"{_mean_bubble(best):.2f} at m={best['m']}, means of the steps (formula {bubble_formula(p, worst['m']):.2f} -> "
            f"{bubble_formula(p, best['m']):.2f}), p={p}"),
        "tensor": (
            f"measured (bytes counted, time the mean of {mlp.get('timed_runs', 1)} runs)",
            f"{mlp['params_per_rank']:,}/{mlp['params_full']:,} MLP params per rank, "
            f"{mlp['allreduce_forward']}+{mlp['allreduce_backward']} all-reduces of {mlp['bytes_forward']:,} B per block; "
            f"fwd+bwd {_times(mlp)['ms split']:.1f} ms split on {tp['world_size']} ranks vs "
            f"{_times(mlp)['ms whole']:.1f} ms for the whole block on one process alone ({tp['hardware']}; "
            f"means of the alternated runs); {paired_text(mlp)}"),
    }
    return [{"strategy": name, "what is split": split, "when to use": when, "kind": ours[name][0],
             "this notebook": ours[name][1]} for name, (split, when) in SEED_003.items()]
