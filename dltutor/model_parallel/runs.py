"""From the kernel: run lab 06's two scripts on N ranks and turn their reports into tables.

The kernel never joins a process group; `launch` starts the ranks (see dltutor.launch.run).
"""
from __future__ import annotations

from dltutor.core.course import lab
from dltutor.core.device import plan_ranks
from dltutor.core.env import cpu_cores
from dltutor.core.spread import mean_and_ci
from dltutor.launch.run import launch
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
    `flags` are the lab's, e.g. tiny=True; `env`/`oversubscribe` as `rank_plan` gives them."""
    result = launch(lab(TP_LAB), nproc=nproc, args=_flags(**flags), env=env, echo=echo,
                    timeout=timeout, oversubscribe=oversubscribe)
    return result.metrics[0]


def run_pipeline(nproc: int = 2, env=None, oversubscribe: bool = False, echo: bool = False,
                 timeout: float = 900, **flags) -> dict:
    """pipeline.py on `nproc` stages: rank 0's timings with the last stage's loss checks."""
    result = launch(lab(PP_LAB), nproc=nproc, args=_flags(**flags), env=env, echo=echo,
                    timeout=timeout, oversubscribe=oversubscribe)
    first, last = result.metrics[0], result.metrics[-1]
    return {**first, "checks": last["checks"]}


def tp_rows(report: dict) -> list[dict]:
    """One row per block: the three checks, the bytes counted beside the formula, and the times:
    `ms whole`/`ms split` the mean of `runs` alternated runs, `± whole`/`± split` the 95 %
    confidence interval of that mean (`dltutor.core.spread`; nan with one run)."""
    n = report["world_size"]
    return [{"ranks": n, "block": b["block"], "out err": b["out_err"], "grad err": b["grad_err"],
             "DTensor err": max(b["dtensor_out_err"], b["dtensor_grad_err"]),
             "ours vs DTensor": b["scratch_vs_dtensor_err"],
             "all-reduces fwd/bwd": f"{b['allreduce_forward']}/{b['allreduce_backward']}",
             "DTensor fwd/bwd": f"{b['dtensor_collectives']['forward']}/"
                                f"{b['dtensor_collectives']['backward']}",
             "bytes each": b["bytes_forward"], "formula bytes": b["formula_bytes"],
             "params/rank": b["params_per_rank"], "params whole": b["params_full"],
             **_times(b), "runs": b.get("timed_runs", 1)} for b in report["blocks"]]


def _times(block: dict) -> dict:
    """A block's mean whole and split times (ms) over the lab's runs, each with its 95 % CI."""
    out = {}
    for form in ("whole", "split"):
        mean, ci = mean_and_ci(block.get(f"ms_{form}_runs") or [block[f"ms_{form}"]])
        out.update({f"ms {form}": mean, f"± {form}": ci})
    return out


BUBBLE_HEADERS = {"measured": "measured (mean of steps)", "spread": "± (95 % CI)"}
"""Headers for `bubble_rows` in a table: what the measured value and its ± are."""


def bubble_rows(report: dict) -> list[dict]:
    """One row per (schedule, m): the mean bubble over the timed steps (the lab's warm-up step
    left out), `spread` = the 95 % confidence interval of that mean (`dltutor.core.spread`; nan
    with one step: no interval), the formula and the most micro-batches held."""
    out = []
    for r in report["runs"]:
        mean, ci = mean_and_ci(r.get("bubbles") or [r["bubble"]])   # = _mean_bubble(r)
        out.append({"stages": r["stages"], "schedule": r["schedule"], "m": r["m"], "measured": mean,
                    "spread": ci, "formula": r["formula"], "difference": mean - r["formula"],
                    "step ms": r["step_s"] * 1e3, "max in flight": max(r["in_flight"])})
    return out


def _mean_bubble(run: dict) -> float:
    """A (schedule, m) run's bubble as the tables show it: the mean over its timed steps."""
    return mean_and_ci(run.get("bubbles") or [run["bubble"]])[0]


def check_rows(report: dict) -> list[dict]:
    return [{"stages": report["world_size"], **c} for c in report["checks"]]


def measured_bytes(tp: dict, pp: dict | None = None) -> list[dict]:
    """Bytes each form would move per step for ONE model, the TP lab's two blocks on its batch
    (tokens = batch x seq, fp32), so the rows compare forms, not model sizes. Each row counts the
    tensors a form communicates, each once (an all-reduce of a tensor counts its size).

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
    return [
        {"form": "tensor (TP)", "kind": "counted", "what moves": "activations, all-reduce",
         "when": "every block, fwd and bwd",
         "bytes per step": tp_bytes, "source": f"counted, {n} ranks, tp_mlp.py"},
        {"form": "pipeline (PP)", "kind": "derived from shapes", "what moves": "activations, point-to-point",
         "when": "every micro-batch at each stage boundary", "bytes per step": 2 * act,
         "source": f"mlp | attention as 2 stages: 2 x {tokens} tokens x {width} x 4 B, any m"},
        {"form": "data (DP)", "kind": "formula only (not run)", "what moves": "gradients, all-reduce",
         "when": "once per step", "bytes per step": params * 4,
         "source": f"the {params:,} parameters of the same blocks x 4 B (a ring sends "
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
            f"{_times(mlp)['ms whole']:.1f} ms whole ({tp['hardware']}; means of the runs, compared "
            "in the findings)"),
    }
    return [{"strategy": name, "what is split": split, "when to use": when, "kind": ours[name][0],
             "this notebook": ours[name][1]} for name, (split, when) in SEED_003.items()]
