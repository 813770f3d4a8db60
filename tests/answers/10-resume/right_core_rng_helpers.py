# expect: solved
# why: the course's rng_state/set_rng_state for every generator, the model and optimizer parts apart, the rank from torch.distributed
import torch.distributed as tdist
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)

from dltutor.checkpoint import exercise_resume as ex
from dltutor.core.env import rng_state, set_rng_state


class MyAppState:                      # no base class: DCP takes any object with these two methods
    def __init__(self, model, optimizer, loop):
        self.model, self.optimizer, self.loop = model, optimizer, loop

    def state_dict(self):
        return {
            "model": get_model_state_dict(self.model),
            "optim": get_optimizer_state_dict(self.model, self.optimizer),
            "position": [self.loop.step, self.loop.epoch, self.loop.offset],
            f"generators/{tdist.get_rank()}": rng_state(),
        }

    def load_state_dict(self, sd):
        set_model_state_dict(self.model, sd["model"])
        set_optimizer_state_dict(self.model, self.optimizer, sd["optim"])
        self.loop.step, self.loop.epoch, self.loop.offset = (int(v) for v in sd["position"])
        set_rng_state(sd[f"generators/{tdist.get_rank()}"])


if __name__ == "__main__":
    ex.run(MyAppState)
