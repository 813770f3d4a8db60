# expect: wrong
# names: the right numbers without any communication mean the work was not split
# why: the other rank's slices rebuilt from the check's seed: the one-process MLP on every rank (its own slices in it, so their gradients are right), no message sent
import os

import torch

from dltutor.model_parallel import exercise_tp as E


def tp_mlp(x, w1, b1, w2, b2):
    full, rank = E.build(int(os.environ[E.SEED_ENV])), int(os.environ["RANK"])
    cut = [E.part(full["w1"].shape[0], r, 2) for r in range(2)]
    W1 = torch.cat([w1 if r == rank else full["w1"][cut[r]] for r in range(2)])
    B1 = torch.cat([b1 if r == rank else full["b1"][cut[r]] for r in range(2)])
    W2 = torch.cat([w2 if r == rank else full["w2"][:, cut[r]] for r in range(2)], 1)
    return E.forward(x, W1, B1, W2, b2)


E.run(tp_mlp)
