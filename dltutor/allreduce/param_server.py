"""A parameter server beside ring all-reduce: one synchronous SGD step each, checked and timed.

Inside a launched task (lab `course/labs/05_allreduce/ps_bench.py`, world = 1 server + W workers):
- `ps_step(grad, params, lr, workers)`   rank 0 is the server: every worker sends it its gradient,
                                         it averages them, updates the parameters and sends them
                                         back to every worker (W·D bytes in and W·D out on its link)
- `ring_step(grad, params, lr, group)`   the workers all-reduce their gradients with gloo's (or
                                         nccl's) `dist.all_reduce` and each applies the same update
- `check_step(w, numel, lr)`             both forms on the same gradients: the parameters they give
- `step_time(form, w, numel, ...)`       seconds per step of one form (`collectives.time_allreduce`)
In the kernel:
- `measure(workers, numel, ...)`         launches the lab on max(workers)+1 ranks, returns its summary
- `rows(summary)`, `table(rows)`        measured time per step beside the α-β model (ping-pong fit)
- `findings(rows)`                       the sentences of what this run shows (`dltutor.core.findings`)
- `plot(rows)`                           time per step vs W: measured and modelled, PS and ring
Cost model (`dltutor.allreduce.cost`, "ps" on W+1 ranks and "ring" on W): the server's link carries
W·D in and W·D out, T_ps = 2W·(α + D·β); the ring sends 2(W−1)/W·D per rank, T_ring = 2(W−1)·α +
2(W−1)/W·D·β. Only the communication and the update are timed: no forward or backward pass.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from dltutor.allreduce import collectives as C
from dltutor.allreduce import cost
from dltutor.core.device import device as rank_device

SERVER = 0
LR = 0.1
FORMS = ("ps", "ring")
FORM_TEXT = {"ps": "parameter server", "ring": "ring all-reduce (dist.all_reduce)"}


# ------------------------------------------------------------------ inside the launched ranks
def ps_step(grad: torch.Tensor, params: torch.Tensor, lr: float, workers) -> torch.Tensor:
    """One synchronous parameter-server step on global ranks SERVER and `workers`; returns `params`.

    Server: receive every worker's gradient (summed in rank order as they arrive), average, update
    `params` in place, send them to every worker. Worker: send `grad`, receive `params`. Other
    ranks: nothing."""
    r, workers = dist.get_rank(), list(workers)
    if r == SERVER:
        bufs = C.scratch(grad.numel() * len(workers), grad.dtype, grad.device).view(len(workers), -1)
        total = torch.zeros_like(grad)
        C.exchange([], list(zip(bufs, workers)), on_recv=lambda i: total.add_(bufs[i]))
        params.sub_(total.div_(len(workers)), alpha=lr)
        C.exchange([(params, w) for w in workers], [])
    elif r in workers:
        dist.send(grad, SERVER)
        dist.recv(params, SERVER)
    return params


def ring_step(grad: torch.Tensor, params: torch.Tensor, lr: float, group, w: int) -> torch.Tensor:
    """One synchronous step without a server: all-reduce the gradient over `group` (the W workers),
    average, and every worker applies the same update to its own copy of `params`."""
    dist.all_reduce(grad, group=group)
    return params.sub_(grad.div_(w), alpha=lr)


def groups(worker_counts) -> dict:
    """W -> the process group of workers 1..W (every rank must create every group, in order)."""
    return {w: dist.new_group(list(range(1, w + 1))) for w in worker_counts}


def worker_gradient(rank: int, numel: int) -> torch.Tensor:
    """Worker `rank`'s gradient in the check: float64 values from seed 100 + rank."""
    return C.random_tensor(numel, torch.float64, 100 + rank)


def start_params(numel: int) -> torch.Tensor:
    return C.random_tensor(numel, torch.float64, 7)


def check_step(w: int, numel: int, group, lr: float = LR) -> dict:
    """Both forms on W workers with the same gradients: {'ps': params, 'ring': params} on worker 1
    (lists), and whether every worker ended with the same bits ('agree')."""
    r = dist.get_rank()
    out = {}
    for form in FORMS:
        params = start_params(numel)
        grad = worker_gradient(r, numel)
        if form == "ps":
            ps_step(grad, params, lr, range(1, w + 1))
        elif 1 <= r <= w:
            ring_step(grad, params, lr, group, w)
        first = params.clone()
        dist.broadcast(first, 1)
        agree = torch.tensor([0.0 if (1 <= r <= w and not torch.equal(first, params)) else 1.0],
                             device=params.device)   # NCCL: collectives take tensors on the GPU
        dist.all_reduce(agree, op=dist.ReduceOp.MIN)
        out[form] = first.tolist()
        out[f"{form}_agree"] = bool(agree.item())
    return out


def step_time(form: str, w: int, numel: int, group, iters: int, warmup: int) -> float:
    """Seconds per step of `form` with W workers, on the slowest rank (every rank calls this)."""
    r = dist.get_rank()
    params = torch.zeros(numel, device=rank_device())
    if form == "ps":
        def fn(x):
            ps_step(x, params, LR, range(1, w + 1))
    else:
        def fn(x):
            if 1 <= r <= w:
                ring_step(x, params, LR, group, w)
    return C.time_allreduce(fn, 4 * numel, torch.float32, iters, warmup)


# ------------------------------------------------------------------ in the kernel
def measure(workers=(2, 3, 4), numel: int = 701_466, iters: int = 5, warmup: int = 1,
            passes: int = 3, timeout: float = 900.0, echo: bool = False) -> dict:
    """Run the lab on max(workers)+1 local ranks (1 server + W workers); rank 0's summary: checks
    (W -> ps equals ring), results (form, workers, time_s, time_range_s, times_s), alpha_s, beta_s_per_byte,
    numel, hardware, world_size. More ranks than cores share them (`oversubscribe`); a node with
    fewer GPUs than ranks runs them all on the CPU (gloo), as `plan_ranks` says."""
    from dltutor.allreduce.sweep import run_lab
    from dltutor.core.device import plan_ranks
    from dltutor.core.env import cpu_cores
    args = ["--workers", ",".join(map(str, workers)), "--numel", str(numel), "--iters", str(iters),
            "--warmup", str(warmup), "--passes", str(passes)]
    n = max(workers) + 1
    plan = plan_ranks([n], need=n)     # fewer GPUs than ranks: all on the CPU (NCCL cannot share)
    return run_lab("ps_bench.py", n, args, timeout=timeout, echo=echo,
                   oversubscribe=not plan.on_gpu and cpu_cores() < n, env=plan.env)[0]


def rows(summary: dict) -> list[dict]:
    """One row per (W, form): the fastest, median and slowest pass (ms per step), every pass
    (`times_ms`, for the paired findings), and the α-β model with the ping-pong's α and β (fitted
    to the ping-pong's fastest passes)."""
    alpha, beta, d = summary["alpha_s"], summary["beta_s_per_byte"], 4 * summary["numel"]
    out = []
    for r in sorted(summary["results"], key=lambda r: (r["workers"], r["form"])):
        w, ts = r["workers"], sorted(r.get("times_s") or [r["time_s"]])
        n, alg = (w + 1, "ps") if r["form"] == "ps" else (w, "ring")
        mid = ts[len(ts) // 2] if len(ts) % 2 else (ts[len(ts) // 2 - 1] + ts[len(ts) // 2]) / 2
        out.append({"workers": w, "form": r["form"], "processes": summary["world_size"],
                    "cores": summary.get("cores"), "gradient_bytes": d,
                    "fastest_ms": 1e3 * ts[0], "median_ms": 1e3 * mid, "slowest_ms": 1e3 * ts[-1],
                    "times_ms": [1e3 * t for t in (r.get("times_s") or [r["time_s"]])],
                    "model_ms": 1e3 * cost.model_time(alg, n, d, alpha, beta),
                    "bytes_sent_by_busiest_rank": w * d if alg == "ps" else 2 * (w - 1) / w * d})
    return out


def table(rows: list[dict]):
    """The rows as a table (HTML in Jupyter, aligned text under print): fastest, median and
    slowest pass, the model and the busiest rank's bytes."""
    from dltutor.core.tables import Table
    p = min(len(r["times_ms"]) for r in rows)
    return Table(rows, ["workers", "form", "fastest_ms", "median_ms", "slowest_ms", "model_ms",
                        "bytes_sent_by_busiest_rank"], missing="n/a",
                 headers={"fastest_ms": f"ms/step, fastest of {p} passes", "median_ms": "median",
                          "slowest_ms": "slowest", "model_ms": "α-β model ms", "bytes_sent_by_busiest_rank":
                          "bytes sent by the busiest rank (model; as many received)"})


def _series(table, form, key):
    mine = [r for r in table if r["form"] == form]
    return [r["workers"] for r in mine], [r[key] for r in mine]


def findings(table: list[dict]) -> list[str]:
    """What this run shows about PS vs ring as W grows (`ps_findings.findings`: paired per pass)."""
    from dltutor.allreduce import ps_findings
    return ps_findings.findings(table)


def plot(table: list[dict], path=None):
    """Time per step vs W: measured (median of passes, bars fastest..slowest) and modelled (dashed)."""
    import matplotlib.pyplot as plt
    from dltutor.core.plots import finish, labels
    from dltutor.core.units import fmt_bytes
    r0 = table[0]
    note = (f"gradient {fmt_bytes(r0['gradient_bytes'])}, {r0['processes']} processes on "
            f"{r0['cores']} cores")
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for form, colour in zip(FORMS, ("tab:red", "tab:blue")):
        ws, ys = _series(table, form, "median_ms")
        lo, hi = _series(table, form, "fastest_ms")[1], _series(table, form, "slowest_ms")[1]
        ax.errorbar(ws, ys, yerr=[[y - a for y, a in zip(ys, lo)], [b - y for y, b in zip(ys, hi)]],
                    fmt="o-", color=colour, capsize=3,
                    label=f"{FORM_TEXT[form]}, measured (median of passes; bar: fastest..slowest)")
        ax.plot(ws, _series(table, form, "model_ms")[1], "--", color=colour,
                label=f"{FORM_TEXT[form]}, α-β model (ping-pong fit)")
    ax.set_xticks(sorted({r["workers"] for r in table}))
    ax.set_xlabel("workers W (the parameter server adds one more process)")
    ax.set_ylabel("ms per step (communication + update)")
    ax.set_title(f"Parameter server vs ring, time per step ({note})\n{labels()}", fontsize=9)
    return finish(fig, ax, path)
