"""Solution of notebook 10's exercise: an app state for DCP that resumes a run bit for bit.

Hidden from the notebook; its check runs it with `exercise_resume.check(solution=True)` and
tests/test_exercises_checkpoint.py proves the check passes on it and fails on broken copies of it
(tests/answers/10-resume/). Run by the check only: it needs the plan the check writes
($DLTUTOR_EXERCISE_RESUME).
"""
import random

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from dltutor.checkpoint import exercise_resume as ex


class MyAppState(Stateful):
    """Everything the run needs to go on where it stopped; DCP calls state_dict() at each save and
    load_state_dict() with what it read (into the tensors state_dict() gave it) at a resume."""

    def __init__(self, model, optimizer, loop):
        self.model, self.optimizer, self.loop = model, optimizer, loop

    def rng_key(self):
        return f"rng.rank{self.loop.rank}"        # each rank draws its own: one key per rank

    def state_dict(self):
        model, optim = get_state_dict(self.model, self.optimizer)   # plain names, no `module.`
        return {"model": model, "optimizer": optim,
                "step": self.loop.step,                              # after this step's update
                "data": {"epoch": self.loop.epoch, "offset": self.loop.offset},
                self.rng_key(): {"torch": torch.get_rng_state(), "python": random.getstate()}}

    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                       optim_state_dict=state_dict["optimizer"])
        self.loop.step = int(state_dict["step"])
        self.loop.epoch = int(state_dict["data"]["epoch"])
        self.loop.offset = int(state_dict["data"]["offset"])
        rng = state_dict[self.rng_key()]
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])      # a tuple: DCP saves it whole (pickled), not split


if __name__ == "__main__":
    ex.run(MyAppState)
