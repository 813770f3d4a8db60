"""Everything a resumed run needs to continue bit for bit, as one DCP `Stateful`: `AppState`.

    app = AppState(model, optimizer, parts=PARTS)     # model may be plain, DDP or FSDP2
    dcp.save({"app": app}, checkpoint_id=...)          # DCP calls app.state_dict() on each rank
    dcp.load({"app": app}, checkpoint_id=...)          # ... then app.load_state_dict(loaded)

The parts (`PARTS`), each saved and loaded only when named in `parts`:

  model      the weights, through torch.distributed.checkpoint.state_dict (get_/set_model_state_dict): keys
             are the plain model's names (no `module.` from DDP, no FSDP wrapping), so a checkpoint
             of a DDP, FSDP2 or plain model loads into any of the three, on any number of ranks
  optimizer  the optimizer's state (momentum, Adam's moments, its step counts) by parameter name
  rng        this rank's python, numpy, torch (and CUDA, when there is one) generator states,
             under a key of the rank's own (`rng.rank<r>`): ranks draw differently (dropout)
  data       where the data stream stands: the sampler's epoch and the batches done in it

The step is always saved. The `rng` part only loads onto a run with the same ranks (rank 3 has
no state in a checkpoint of 2 ranks: the load says the missing key); to reshard, load
`parts=("model", "optimizer")`. Leaving a part out is how a test (or the exercise) shows what a
resume without it costs.
"""
from __future__ import annotations

from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.checkpoint.stateful import Stateful

from dltutor.core.env import rng_state, set_rng_state

PARTS = ("model", "optimizer", "rng", "data")


def check_parts(parts) -> tuple:
    """`parts` as a tuple, every name one of PARTS (else ValueError naming the unknown ones)."""
    parts = tuple(parts)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"unknown checkpoint part(s) {unknown}: choose from {', '.join(PARTS)}")
    return parts


class AppState(Stateful):
    """The model, optimizer, step, this rank's RNG states and the data position, for DCP.

    `step` and `data` ({"epoch": e, "offset": batches done in epoch e}) are plain attributes the
    training loop sets before each save and reads after a load; `loaded` is the set of parts the
    last load restored."""

    def __init__(self, model, optimizer, parts=PARTS, rank: int = 0):
        self.model, self.optimizer = model, optimizer
        self.parts = check_parts(parts)
        self.rank = rank
        self.step = 0
        self.data = {"epoch": 0, "offset": 0}
        self.loaded: set = set()

    def rng_key(self) -> str:
        return f"rng.rank{self.rank}"

    def state_dict(self) -> dict:
        out = {"step": self.step}
        if "model" in self.parts:
            out["model"] = get_model_state_dict(self.model)  # DCP: plain names, shards as DTensors
        if "optimizer" in self.parts:
            out["optimizer"] = get_optimizer_state_dict(self.model, self.optimizer)  # DCP: by name
        if "rng" in self.parts:
            out[self.rng_key()] = rng_state()
        if "data" in self.parts:
            out["data"] = dict(self.data)
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        self.step = int(state_dict["step"])
        if "model" in self.parts:
            set_model_state_dict(self.model, state_dict["model"])
        if "optimizer" in self.parts:
            set_optimizer_state_dict(self.model, self.optimizer, state_dict["optimizer"])
        if "rng" in self.parts:
            set_rng_state(state_dict[self.rng_key()])
        if "data" in self.parts:
            self.data = {k: int(v) for k, v in state_dict["data"].items()}
        self.loaded = {p for p in self.parts}
