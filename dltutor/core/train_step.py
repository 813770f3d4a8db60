"""One training step, written once: forward, loss, backward, optimizer step.

    loss, out = train_step(model, optimizer, x, y)                         # cross-entropy
    loss, _ = train_step(net, opt, tokens, labels, loss_fn=None)           # the model returns its loss
    loss, _ = train_step(ddp_model, opt, x, y, no_sync=ddp_model.no_sync,  # DDP: no overlap, then
                         before_step=lambda: allreduce_gradients(...))     # all-reduce by hand

Every training loop of the course (lab and notebook 01's `fit`, the speed comparison, lab 02's DDP
loop, lab 03's synthetic benchmark, lab 04's BERT) calls this. Mixed precision: pass a function that
returns the autocast context, e.g. `autocast=lambda: device.autocast(dev)`, and
`scaler=device.grad_scaler(dev)` (fp16 needs one, bf16 does not). `before_step()` runs between backward and the optimizer step.
"""
from __future__ import annotations

import contextlib


def train_step(model, optimizer, x, y, *, loss_fn="cross_entropy", autocast=None, scaler=None,
               no_sync=None, before_step=None):
    """One step on the batch (x, y); returns (loss, model output) — output None if loss_fn=None."""
    import torch.nn.functional as F
    if loss_fn == "cross_entropy":
        loss_fn = F.cross_entropy
    optimizer.zero_grad()  # torch clears to None by default; Horovod's optimizer takes no argument
    with (no_sync or contextlib.nullcontext)():
        with autocast() if autocast is not None else contextlib.nullcontext():
            if loss_fn is None:
                out, loss = None, model(x, y)
            else:
                out = model(x)
                loss = loss_fn(out, y)
        (scaler.scale(loss) if scaler is not None else loss).backward()
    if before_step is not None:
        before_step()
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return loss, out
