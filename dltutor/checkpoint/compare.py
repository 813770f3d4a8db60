"""Are two runs' parameters the same, bit for bit? Full state dicts, digests, largest differences.

    sd = full_model_state(model)       # every rank calls it (FSDP2 gathers); plain CPU tensors
    digest(sd)                         # sha256 of every tensor's bytes, in key order
    max_abs_diff(sd_a, sd_b)           # 0.0 exactly when the two agree bit for bit (finite values)
    to_torch_file(ckpt_dir, out)       # `python -m torch.distributed.checkpoint.format_utils
                                       #  dcp_to_torch ckpt_dir out`: one torch.save file
    read_torch_file(out)               # the app state inside it (`{"model": ..., "step": ...}`)
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from dltutor.checkpoint.store import KEY


def full_model_state(model) -> dict:
    """The whole model's parameters and buffers as CPU tensors by plain name (no `module.`, no
    shards). A collective under FSDP2: every rank calls it, every rank gets the full dict."""
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    return {k: v.detach().cpu().clone() for k, v in sd.items()}


def digest(sd: dict) -> str:
    """sha256 (hex) over the keys and the raw bytes of every tensor, in sorted key order."""
    h = hashlib.sha256()
    for key in sorted(sd):
        t = sd[key].detach().cpu().contiguous()
        h.update(key.encode())
        h.update(str(t.dtype).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def max_abs_diff(a: dict, b: dict) -> float:
    """The largest |a - b| over every tensor of two state dicts with the same keys and shapes
    (ValueError naming the first key that differs in name or shape)."""
    if set(a) != set(b):
        first = sorted(set(a) ^ set(b))[0]
        raise ValueError(f"the state dicts differ in their keys: {first} is in only one of them")
    worst = 0.0
    for key in sorted(a):
        x, y = a[key].detach().cpu(), b[key].detach().cpu()
        if x.shape != y.shape:
            raise ValueError(f"{key}: shape {tuple(x.shape)} against {tuple(y.shape)}")
        if x.numel():
            worst = max(worst, (x.double() - y.double()).abs().max().item())
    return worst


def to_torch_file(ckpt_dir, out, timeout: float = 300.0) -> Path:
    """Convert a DCP folder into one torch.save file with torch's own command line tool."""
    cmd = [sys.executable, "-m", "torch.distributed.checkpoint.format_utils", "dcp_to_torch",
           str(ckpt_dir), str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return Path(out)


def read_torch_file(path) -> dict:
    """The app state of a file `to_torch_file` wrote (DCP's nested dicts, the app under KEY)."""
    loaded = torch.load(path, map_location="cpu", weights_only=False)
    return loaded[KEY]
