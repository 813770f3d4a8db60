"""In the kernel: judge what the ranks of notebook 02's (or 03's) exercise did, by its properties.

    problems, summary = judge(metrics, nproc, hints, samples=n)   # one launch's records; n: the
                                                                  # data set's size in that launch

Each property is checked on what the ranks recorded (`dltutor.ddp.exercise`), whatever calls the
student used to get it (DDP or gradients averaged by hand, any sampler seed, any sampler):
  * data      in every epoch the ranks' reads are disjoint (DistributedSampler's padding of at
              most world_size - 1 repeats allowed) and cover the data set, whose size (drawn per
              check) leaves a remainder: a remainder dropped (shards of n // world_size, a
              sampler's or loader's drop_last=True) is named with the samples no rank read; each
              rank's order is shuffled, and reshuffled from one epoch to the next;
  * start     every rank starts from the same weights: the ranks' weights differ by exactly their
              starting difference when only that is missing;
  * average   the ranks end with the same weights, equal to ONE process replaying the same steps
              (each step the mean of the ranks' losses on the batches they read) from a rank's
              starting weights, to float precision; a step world_size times too large (summed
              gradients, a learning rate times world_size) or too small is recognised and named;
  * checkpoint  rank 0 alone writes one, of the plain model's trained weights;
  * teardown  (DDP) no process group is left open at the end.
`untouched(...)` tells the handed-out skeleton (nothing distributed written) from a wrong answer.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from dltutor.ddp import exercise as ex

TOLERANCE = 1e-5       # max |difference| of a weight allowed against the reference


def finals_of(metrics: list[dict]) -> list[dict]:
    return sorted((m for m in metrics if m.get("event") == "final"), key=lambda m: m["rank"])


def epochs_of(seen: list[int]) -> list[list[int]] | None:
    """A rank's reads cut into its EPOCHS epochs (None when they do not cut evenly)."""
    if not seen or len(seen) % ex.EPOCHS:
        return None
    per = len(seen) // ex.EPOCHS
    return [seen[e * per:(e + 1) * per] for e in range(ex.EPOCHS)]


def _listed(indices: list[int], most: int = 8) -> str:
    shown = ", ".join(map(str, indices[:most]))
    return f"sample{'s' * (len(indices) > 1)} {shown}{', ...' * (len(indices) > most)}"


def _remainder_dropped(e: int, missed: list[int], reads: list[list[int]], n: int) -> str:
    """Disjoint shards that leave samples out: say which, and what dropped them."""
    world, counts = len(reads), sorted({len(r) for r in reads})
    head = (f"in epoch {e + 1}, {len(missed)} of the {n} samples "
            f"{'was' if len(missed) == 1 else 'were'} read by no rank "
            f"({_listed(missed)} of ex.dataset()). ")
    if counts == [n // world]:
        how = (f"Each rank read n // world_size = {n // world} samples: the remainder of "
               f"{n} / {world} was dropped (shards of n // world_size samples, or "
               f"DistributedSampler's drop_last=True). ")
    elif all(c % ex.PER_RANK_BATCH == 0 for c in counts):
        how = (f"Each rank's reads stop at a whole number of batches of {ex.PER_RANK_BATCH}: "
               f"its last, partial batch was dropped (the DataLoader's drop_last=True). ")
    else:
        how = "The ranks' shards do not cover the data set. "
    return head + how + (
        f"The one process the check compares with trains on every sample in every epoch, so "
        f"every sample must be read by some rank; the check's data set ({n} samples, a size "
        f"drawn for this check) does not divide by the {world} ranks, and DistributedSampler's "
        f"default (drop_last=False) evens the shards out by repeating a sample, which is fine")


def _shard_problems(epochs: list[list[list[int]]], n: int, hints: dict) -> list[str]:
    world = len(epochs)
    for e in range(ex.EPOCHS):
        reads = [rank[e] for rank in epochs]
        if all(set(r) >= set(range(n)) for r in reads):
            return [hints["shard"]]
        union = set().union(*reads)
        repeated = sum(map(len, reads)) - len(union)
        missed = sorted(set(range(n)) - union)
        if missed and not repeated:
            return [_remainder_dropped(e, missed, reads, n)]
        if repeated > world - 1 or missed:
            return [f"in epoch {e + 1} the ranks' shards are not a split of the data: "
                    f"{repeated} read(s) repeated a sample another rank (or this one) read, "
                    f"{len(missed)} of the {n} samples were read by no rank"
                    f"{' (' + _listed(missed) + ')' if missed else ''}. Every rank's sampler "
                    f"must split the same shuffled order (the same seed on every rank), each "
                    f"rank taking its own part"]
    return []


def _order_problems(epochs: list[list[list[int]]], hints: dict) -> list[str]:
    if any(r[e] == sorted(r[e]) for r in epochs for e in range(ex.EPOCHS)):
        return [hints["no_shuffle"]]
    if any(r[e] == r[e - 1] for r in epochs for e in range(1, ex.EPOCHS)):
        return [hints["set_epoch"]]
    return []


def data_problems(finals: list[dict], n: int, hints: dict) -> list[str]:
    epochs = [epochs_of(f["seen"]) for f in finals]
    if any(e is None for e in epochs):
        counts = [len(f["seen"]) for f in finals]
        return [f"the ranks read {counts} samples in {ex.EPOCHS} epochs: each rank must read the "
                f"same number every epoch through the loader (keep num_workers at 0: the data "
                f"set notes what a rank reads)"]
    return _shard_problems(epochs, n, hints) + _order_problems(epochs, hints)


def steps_of(finals: list[dict]) -> list[list[list[int]]] | None:
    """Per training step, the batch each rank read (its epochs cut into PER_RANK_BATCH), or None
    when the ranks did not take the same number of steps."""
    per_rank = []
    for f in finals:
        epochs = epochs_of(f["seen"])
        if epochs is None:
            return None
        per_rank.append([ep[i:i + ex.PER_RANK_BATCH] for ep in epochs
                         for i in range(0, len(ep), ex.PER_RANK_BATCH)])
    if len({len(b) for b in per_rank}) != 1:
        return None
    return [list(step) for step in zip(*per_rank)]


def replay(init, steps, n: int, lr_factor: float = 1.0) -> torch.Tensor:
    """One process from the starting weights `init`, each step the mean of the ranks' losses
    on their batches of the `n` samples (what averaged gradients give), with ex.optimizer's LR
    times `lr_factor`."""
    model = ex.build_model()
    vec = torch.as_tensor(init, dtype=torch.float64).float()
    torch.nn.utils.vector_to_parameters(vec, model.parameters())
    opt = ex.optimizer(model.parameters())
    for group in opt.param_groups:
        group["lr"] *= lr_factor
    x, y = ex.make_tensors(n)
    for batches in steps:
        opt.zero_grad()
        loss = sum(F.cross_entropy(model(x[b]), y[b]) for b in batches) / len(batches)
        loss.backward()
        opt.step()
    return ex.flat(model)


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def weight_problems(finals: list[dict], n: int, hints: dict) -> tuple[list[str], str]:
    params = [torch.tensor(f["params"], dtype=torch.float64) for f in finals]
    init = [torch.tensor(f["init"], dtype=torch.float64) for f in finals]
    spread = max(_gap(p, params[0]) for p in params)
    if spread > TOLERANCE:
        same_shift = all(_gap(p - params[0], i - init[0]) < TOLERANCE for p, i in zip(params, init))
        return [hints["broadcast" if same_shift else "average"]], ""
    steps = steps_of(finals)
    if steps is None:
        if all(epochs_of(f["seen"]) is not None for f in finals):   # else the data problems say
            return ["the ranks took different numbers of steps: every rank must take the same "
                    "number of batches each epoch (shards of equal length)"], ""
        return [], ""
    world = len(finals)
    starts = [i for r, i in enumerate(init) if all(_gap(i, j) > 0 for j in init[:r])]
    off = min(_gap(params[0], replay(s, steps, n)) for s in starts)
    note = (f"both ranks agree (max |difference| {spread:.1e}) and match one process on the "
            f"same global batches ({world} x {ex.PER_RANK_BATCH} samples per step; max "
            f"|difference| {off:.1e})")
    if off <= TOLERANCE:
        return [], note
    for factor, key in ((world, "summed"), (1 / world, "too_small")):
        if _gap(params[0], replay(init[0], steps, n, factor)) <= TOLERANCE:
            return [hints[key]], note
    return [f"the ranks agree, but differ from one process on the same global batches by up to "
            f"{off:.2e}: each step must apply the mean of the ranks' gradients once, with "
            f"ex.optimizer's learning rate, to weights that started equal on every rank"], note


def checkpoint_problems(events: list[dict], finals: list[dict], hints: dict) -> list[str]:
    writers = sorted(e["rank"] for e in events)
    if not writers:
        return ["no checkpoint was written: rank 0 should call ex.save_checkpoint(...)"]
    out = [] if writers == [0] else [f"rank(s) {writers} wrote the checkpoint: {hints['rank0']}"]
    state = torch.load(events[-1]["path"], map_location="cpu")
    names = list(ex.build_model().state_dict())
    if any(str(k).startswith("module.") for k in state):
        return out + [hints["module"]]
    if sorted(state) != sorted(names):
        return out + ["the checkpoint is not the model's state_dict(): save "
                      "model.state_dict() of the plain model"]
    saved = torch.cat([state[k].reshape(-1).double() for k in names])
    by_rank = {f["rank"]: torch.tensor(f["params"], dtype=torch.float64) for f in finals}
    if all(_gap(saved, by_rank[r]) > TOLERANCE for r in writers if r in by_rank):
        out.append("the checkpoint does not hold the final weights: write it after training")
    return out


def untouched(finals: list[dict], events: list[dict], n: int) -> bool:
    """The skeleton as handed out: no group joined, every rank read all `n` samples every epoch
    and wrote the checkpoint (nothing distributed written yet)."""
    every = set(range(n))
    read_all = all(epochs_of(f["seen"]) is not None
                   and all(set(e) >= every for e in epochs_of(f["seen"])) for f in finals)
    return (not any(f["in_group"] for f in finals) and read_all
            and sorted(e["rank"] for e in events) == [f["rank"] for f in finals])


def judge(metrics: list[dict], nproc: int, hints: dict, teardown: bool = True, *,
          samples: int) -> tuple[list[str], str]:
    """(problems, summary) of one launch's DLTUTOR_METRICS records, whose data set held
    `samples` samples."""
    finals = finals_of(metrics)
    if [m["rank"] for m in finals] != list(range(nproc)):
        return [f"only rank(s) {[m['rank'] for m in finals]} of {nproc} reached ex.report(model)"
                ], ""
    problems = [] if all(f["in_group"] for f in finals) else [hints["init"]]
    problems += data_problems(finals, samples, hints)
    weights, summary = weight_problems(finals, samples, hints)
    problems += weights
    problems += checkpoint_problems([m for m in metrics if m.get("event") == "checkpoint"],
                                    finals, hints)
    if teardown and any(f["group_open_at_end"] for f in finals):
        problems.append(hints["teardown"])
    return problems, summary
