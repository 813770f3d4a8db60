"""In the kernel: run the student's DDP (or Horovod) exercise script on 2 ranks and judge it.

    check(path)                 # launch path on 2 gloo ranks, print "passed: ...", "not yet: ..."
                                # (nothing distributed written) or "wrong: ..." (each thing that
                                # differs); never raises for those (dltutor.grading.verdict)
    check(solution=True)        # the hidden solution, course/labs/02_ddp/solutions/exercise_ddp.py

What is judged is what the ranks did, recorded by `dltutor.ddp.exercise`, against the library:
  * a process group was open while the ranks read data;
  * each rank read exactly the shard DistributedSampler(num_replicas=W, rank=r, seed=0) gives,
    reshuffled every epoch (set_epoch);
  * both ranks end with the same weights, and those equal a single process that trains from rank
    0's initial weights on the same global batches (W x the per-rank batch), to float precision;
  * exactly one checkpoint, written by rank 0, of the plain model (no "module." prefix);
  * (DDP) no process group is left open at the end.
`dltutor.horovod.exercise` uses the same judge with Horovod's wording.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from dltutor.core import course
from dltutor.ddp import exercise as ex
from dltutor.grading import ranks
from dltutor.grading.verdict import Verdict, from_problems, not_yet, wrong

NPROC = 2
TOLERANCE = 1e-5       # max |difference| of a weight allowed against the reference

HINTS = {  # what to write, in the words of the notebook's TODOs
    "init": "no process group was open while the ranks trained: join it first "
            "(TODO 1: dist.init_process_group('gloo'), then rank and world size from it)",
    "shard": "every rank read the whole data set: give each rank its own 1/world_size "
             "(TODO 2: DistributedSampler(data, num_replicas=world_size, rank=rank) as the "
             "loader's sampler)",
    "set_epoch": "every epoch read the same order: call sampler.set_epoch(epoch) at the start "
                 "of each epoch (TODO 3)",
    "average": "the ranks end with different weights: their gradients were not averaged "
               "(TODO 4: model = DDP(model))",
    "broadcast": "the ranks kept their different random starting weights (DDP(model) copies "
                 "rank 0's weights to all ranks when it wraps the model; TODO 4)",
    "rank0": "only rank 0 should write the checkpoint (TODO 5: `if rank == 0:`)",
    "module": "the checkpoint holds the DDP wrapper's names ('module.0.weight'): save "
              "model.module.state_dict(), the model inside DDP (TODO 5)",
    "teardown": "the process group is still open at the end: dist.destroy_process_group() "
                "(TODO 6)",
}


def work_file(name: str = "exercise_ddp.py"):
    """Where the notebook writes the student's script (`%%writefile {path}`): a user folder."""
    return ranks.work_file(name)


def shard_order(world_size: int, rank: int, epochs: int = ex.EPOCHS) -> list[int]:
    """The indices a correct rank reads: DistributedSampler's shard, epoch after epoch."""
    sampler = DistributedSampler(range(ex.SAMPLES), num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=0)
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out += list(sampler)
    return out


def reference(init: list[float], world_size: int) -> torch.Tensor:
    """One process, rank 0's starting weights, the global batches of `world_size` ranks: the
    samples of global step i are ranks' step-i batches together, which is DistributedSampler's
    (one replica) order cut into batches of world_size x PER_RANK_BATCH."""
    model = ex.build_model()
    init = torch.tensor(init, dtype=torch.float64)
    torch.nn.utils.vector_to_parameters(init.float(), model.parameters())
    opt = ex.optimizer(model.parameters())
    x, y = ex.make_tensors()
    batch = world_size * ex.PER_RANK_BATCH
    for epoch in range(ex.EPOCHS):
        order = shard_order(1, 0, epochs=epoch + 1)[epoch * ex.SAMPLES:]
        for i in range(0, len(order), batch):
            idx = torch.tensor(order[i:i + batch])
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return ex.flat(model)


def _data_problems(finals: list[dict], hints: dict) -> list[str]:
    world = len(finals)
    seen = [f["seen"] for f in finals]
    if all(s == shard_order(world, r) for r, s in enumerate(seen)):
        return []
    other = ["the ranks did not read the shards DistributedSampler(data, num_replicas=world_size, "
             "rank=rank) gives with its defaults (shuffle=True, seed=0); keep those defaults"]
    n = len(seen[0])
    if any(len(s) != n for s in seen) or n % ex.EPOCHS:
        return other
    per = n // ex.EPOCHS
    epochs = [[set(s[e * per:(e + 1) * per]) for s in seen] for e in range(ex.EPOCHS)]
    if per >= ex.SAMPLES or any(sum(map(len, ep)) > len(set().union(*ep)) for ep in epochs):
        return [hints["shard"]]
    if all(s[:per] == s[per:2 * per] for s in seen):
        return [hints["set_epoch"]]
    return other


def _weight_problems(finals: list[dict], hints: dict, explained: bool) -> tuple[list[str], str]:
    params = [torch.tensor(f["params"], dtype=torch.float64) for f in finals]
    init = [torch.tensor(f["init"], dtype=torch.float64) for f in finals]
    spread = max((p - params[0]).abs().max().item() for p in params)
    if spread > TOLERANCE:
        same_shift = all(((p - params[0]) - (i - init[0])).abs().max().item() < TOLERANCE
                         for p, i in zip(params, init))
        return [hints["broadcast" if same_shift else "average"]], f"ranks differ by {spread:.2e}"
    ref = reference(finals[0]["init"], len(finals))
    off = (params[0] - ref).abs().max().item()
    note = (f"both ranks agree (max |difference| {spread:.1e}) and match one process on the "
            f"global batch of {len(finals) * ex.PER_RANK_BATCH} (max |difference| {off:.1e})")
    if off > TOLERANCE and not explained:
        return [f"the ranks agree, but differ from one process on the same global batches by "
                f"up to {off:.2e}: keep ex.optimizer, the loss and the loop as given"], note
    return ([] if off <= TOLERANCE else [f"(so the weights differ from one process on the same "
                                         f"global batches by up to {off:.2e})"]), note


def _checkpoint_problems(events: list[dict], hints: dict) -> list[str]:
    writers = sorted(e["rank"] for e in events)
    if not writers:
        return ["no checkpoint was written: rank 0 should call ex.save_checkpoint(...)"]
    out = [] if writers == [0] else [f"rank(s) {writers} wrote the checkpoint: {hints['rank0']}"]
    state = torch.load(events[-1]["path"], map_location="cpu")
    if any(k.startswith("module.") for k in state):
        out.append(hints["module"])
    return out


def judge(metrics: list[dict], nproc: int = NPROC, hints: dict = HINTS,
          teardown: bool = True) -> tuple[list[str], str]:
    """(problems, summary) of one launch's DLTUTOR_METRICS records."""
    finals = sorted((m for m in metrics if m.get("event") == "final"), key=lambda m: m["rank"])
    if [m["rank"] for m in finals] != list(range(nproc)):
        return [f"only rank(s) {[m['rank'] for m in finals]} of {nproc} reached ex.report(model)"
                ], ""
    problems = [] if all(f["in_group"] for f in finals) else [hints["init"]]
    problems += _data_problems(finals, hints)
    weights, summary = _weight_problems(finals, hints, explained=bool(problems))
    problems += weights
    problems += _checkpoint_problems([m for m in metrics if m.get("event") == "checkpoint"], hints)
    if teardown and any(f["group_open_at_end"] for f in finals):
        problems.append(hints["teardown"])
    return problems, summary


def verdict(problems: list[str], summary: str, exercise: str = "02-ddp", hints: dict = HINTS,
            reference: bool = False) -> Verdict:
    """solved (with the evidence), not yet (no process group was ever joined: none of the
    distributed lines written) or wrong (each thing that differs)."""
    started = hints["init"] not in problems
    return from_problems(exercise, problems, f"{summary}; one checkpoint, written by rank 0",
                         started=started, reference=reference)


def run_and_judge(script, backend: str, args=(), hints: dict = HINTS, teardown: bool = True,
                  echo: bool = True, timeout: float = 180.0, exercise: str = "02-ddp",
                  reference: bool = False) -> bool:
    """Launch `script` on NPROC CPU ranks and show the verdict; a crash is 'wrong' (or 'not
    yet' when a TODO still raises NotImplementedError)."""
    from dltutor.launch.results import LaunchError
    from dltutor.launch.run import launch
    if ranks.missing(script):
        return not_yet(exercise, ranks.missing(script), reference=reference).show()
    # each check gets its own checkpoint folder: two checks at once never share a file
    with tempfile.TemporaryDirectory(dir=work_file().parent, prefix="ckpt-") as folder:
        env = {ex.CHECKPOINT_ENV: str(Path(folder) / "checkpoint.pt"), "CUDA_VISIBLE_DEVICES": "",
               "DLTUTOR_DIST_TIMEOUT": "60"}
        try:
            result = launch(script, nproc=NPROC, backend=backend, args=list(args), env=env,
                            threads=1, timeout=timeout, echo=echo)
        except LaunchError as exc:
            ran = ranks.Ran(failure=str(exc), logs=exc.result.logs if exc.result else {})
            make = not_yet if ran.unstarted else wrong
            return make(exercise, f"the script failed ({type(exc).__name__}); fix it and run "
                        f"this cell again.\n{exc}", reference=reference).show()
        return verdict(*judge(result.metrics, NPROC, hints, teardown), exercise=exercise,
                       hints=hints, reference=reference).show()


def check(script=None, solution: bool = False, echo: bool = True) -> bool:
    """Notebook 02's exercise: run `script` (the student's file) with torchrun on 2 gloo ranks."""
    if solution:
        script = course.lab("02_ddp/solutions/exercise_ddp.py")
    return run_and_judge(script if script is not None else work_file(), "local", echo=echo,
                         reference=solution)
