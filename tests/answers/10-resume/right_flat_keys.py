# expect: solved
# why: flat keys, the Python state kept as a tensor of its 625 words, everything set back by hand
import random

import torch
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful

from dltutor.checkpoint import exercise_resume as ex


class MyAppState(Stateful):
    def __init__(self, model, optimizer, loop):
        self.model, self.optimizer, self.loop = model, optimizer, loop

    def state_dict(self):
        model, optim = get_state_dict(self.model, self.optimizer)
        version, words, gauss = random.getstate()
        r = self.loop.rank
        return {"model": model, "optim": optim, "step": self.loop.step,
                "epoch": self.loop.epoch, "offset": self.loop.offset,
                f"torch_rng_{r}": torch.get_rng_state(),
                f"py_words_{r}": torch.tensor(words, dtype=torch.int64),
                f"py_rest_{r}": [version, gauss]}

    def load_state_dict(self, sd):
        set_state_dict(self.model, self.optimizer, model_state_dict=sd["model"],
                       optim_state_dict=sd["optim"])
        self.loop.step, self.loop.epoch, self.loop.offset = sd["step"], sd["epoch"], sd["offset"]
        r = self.loop.rank
        torch.set_rng_state(sd[f"torch_rng_{r}"])
        version, gauss = sd[f"py_rest_{r}"]
        random.setstate((version, tuple(int(w) for w in sd[f"py_words_{r}"]), gauss))


if __name__ == "__main__":
    ex.run(MyAppState)
