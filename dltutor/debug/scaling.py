"""Dynamic loss scaling on overflows: torch's GradScaler and DeepSpeed's fp16 scaler, as installed.

    steps = deepspeed_overflows(3)   # DeepSpeed's own DynamicLossScaler, its defaults, 3 overflows
    steps = torch_overflows(3)       # torch.amp.GradScaler's update after 3 inf gradients
    scaling_findings(3)              # the sentences notebook 08 prints: scale after each overflow

Both scalers are run, not described: DeepSpeed's `DynamicLossScaler` is built from
`DeepSpeedFP16Config()`'s defaults (its `hysteresis` among them) and fed overflows; its only
use of the process group is to ask for the rank before logging, so a one-rank stand-in answers
0, and its logger is replaced by a list that keeps the lines it would have logged. torch's
`GradScaler` runs on the CPU with an inf gradient each step. Each returns one row per overflow:
the scale before and after, and (DeepSpeed) the line it logged (torch: whether the step was
skipped, the weight unchanged).
"""
from __future__ import annotations

from types import SimpleNamespace
from unittest import mock


def deepspeed_overflows(n: int = 3) -> list[dict]:
    """DeepSpeed's fp16 scaler with its default config, after `n` overflows in a row."""
    import torch
    from deepspeed.runtime.fp16 import loss_scaler
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config
    scaler = loss_scaler.DynamicLossScaler(dtype=torch.half,
                                           **DeepSpeedFP16Config().dynamic_loss_scale_args())
    lines, rows = [], []
    rank0 = SimpleNamespace(get_rank=lambda *a, **k: 0)
    with mock.patch.object(loss_scaler, "dist", rank0), \
            mock.patch.object(loss_scaler, "logger", SimpleNamespace(info=lines.append)):
        for i in range(n):
            before, logged = scaler.cur_scale, len(lines)
            scaler.update_scale(True)
            rows.append(dict(overflow=i + 1, before=before, after=scaler.cur_scale,
                             log=" ".join(lines[logged:])))
    return rows


def torch_overflows(n: int = 3) -> list[dict]:
    """torch.amp.GradScaler (CPU, default arguments) after `n` steps whose gradients hold an inf."""
    import torch
    w = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler, rows = torch.amp.GradScaler("cpu"), []
    for i in range(n):
        before, weight = scaler.get_scale(), w.item()
        scaler.scale((w * float("inf")).sum()).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        rows.append(dict(overflow=i + 1, before=before, after=scaler.get_scale(),
                         skipped=w.item() == weight))
    return rows


def _path(rows) -> str:
    return ", ".join(f"{r['before']:g} -> {r['after']:g}" for r in rows)


def scaling_findings(n: int = 3) -> list[str]:
    """What each scaler does to the scale on `n` overflows in a row, from running them."""
    import deepspeed
    import torch
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config
    t, d = torch_overflows(n), deepspeed_overflows(n)
    kept = [r["overflow"] for r in d if r["after"] == r["before"]]
    cfg = DeepSpeedFP16Config()
    out = [f"torch {torch.__version__} GradScaler (defaults, backoff_factor "
           f"{torch.amp.GradScaler('cpu').get_backoff_factor():g}), {n} overflows in a row: "
           f"{_path(t)}; the weight unchanged (step skipped) after {sum(r['skipped'] for r in t)} "
           f"of them."]
    out.append(f"DeepSpeed {deepspeed.__version__} fp16 scaler (defaults, hysteresis "
               f"{cfg.hysteresis}, consecutive_hysteresis {cfg.consecutive_hysteresis}), the same "
               f"{n} overflows: {_path(d)}; "
               + (f"overflow(s) {kept} kept the scale" if kept else "each one lowered the scale")
               + f", {sum('Skipping step' in r['log'] for r in d)} of {n} logged "
               + '"Skipping step".')
    if d:
        out.append(f"DeepSpeed logged at the first: \"{d[0]['log']}\"" + (
            f"; at the last: \"{d[-1]['log']}\"." if len(d) > 1 else "."))
    return out


__all__ = ["deepspeed_overflows", "scaling_findings", "torch_overflows"]
