# expect: wrong
# names: the step is 0 where the checkpoint is of step
# why: a plain dict built once in __init__ and handed to DCP at every save: the step, data position and RNG states in it are those of step 0
import random

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from dltutor.checkpoint import exercise_resume as ex


class MyAppState(Stateful):
    def __init__(self, model, optimizer, loop):
        self.model, self.optimizer, self.loop = model, optimizer, loop
        model_sd, optim_sd = get_state_dict(model, optimizer)
        self.saved = {"model": model_sd, "optimizer": optim_sd, "step": loop.step,
                      "epoch": loop.epoch, "offset": loop.offset,
                      f"rng{loop.rank}": {"torch": torch.get_rng_state(),
                                          "python": random.getstate()}}

    def state_dict(self):
        return self.saved

    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optimizer"])
        self.loop.step = state_dict["step"]
        self.loop.epoch, self.loop.offset = state_dict["epoch"], state_dict["offset"]
        rng = state_dict[f"rng{self.loop.rank}"]
        torch.set_rng_state(rng["torch"])
        version, internal, gauss = rng["python"]
        random.setstate((version, tuple(internal), gauss))


if __name__ == "__main__":
    ex.run(MyAppState)
