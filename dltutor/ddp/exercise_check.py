"""In the kernel: run the student's DDP (or Horovod) exercise script on 2 ranks and judge it.

    check(path)                 # launch path on 2 gloo ranks, print "passed: ...", "not yet: ..."
                                # (the skeleton as handed out) or "wrong: ..." (each thing that
                                # differs); never raises for those (dltutor.grading.verdict)
    check(solution=True)        # the hidden solution, course/labs/02_ddp/solutions/exercise_ddp.py

What is judged is what the ranks did, recorded by `dltutor.ddp.exercise`, by its properties
(`dltutor.ddp.exercise_judge`), whatever calls produced it: a process group was open while the
ranks read data; in every epoch each rank read its own shard of the data, the shards covering it
(its size is drawn per check, `draw_samples()`, and never divides by the ranks: a remainder
dropped shows), shuffled and reshuffled every epoch; the ranks started equal and end with the same weights, equal
to one process on the same global batches (gradients averaged, not summed); exactly one
checkpoint, written by rank 0, of the plain model's final weights; (DDP) no process group left
open at the end. `dltutor.horovod.exercise` uses the same judge with Horovod's wording.
"""
from __future__ import annotations

import random
import tempfile
from pathlib import Path

from dltutor.core import course
from dltutor.ddp import exercise as ex
from dltutor.ddp.exercise_judge import finals_of, judge, untouched
from dltutor.grading import ranks
from dltutor.grading.verdict import Verdict, from_problems, not_yet, wrong

NPROC = 2
SIZES = range(40, 90)       # the data set sizes a check draws from (those `fits` keeps)

HINTS = {  # what is missing, in the words of the notebook's TODOs (never the code)
    "init": "no process group was open while the ranks trained: join the group torchrun set "
            "up first, then ask it for this rank and the world size (TODO 1)",
    "shard": "every rank read the whole data set: give each rank its own 1/world_size of it, "
             "with a sampler that knows this rank and the world size (TODO 2)",
    "no_shuffle": "the data is never shuffled: each rank read its shard in the stored order, "
                  "the same every epoch (the sampler's shuffle is off)",
    "set_epoch": "every epoch read the same shuffled order as the epoch before: tell the "
                 "sampler which epoch begins (its set_epoch), so that it shuffles anew "
                 "(TODO 3)",
    "average": "the ranks end with different weights: their gradients were not averaged; wrap "
               "the model so that its gradients are averaged over the ranks (TODO 4)",
    "broadcast": "the ranks kept their different random starting weights: every rank must "
                 "start from rank 0's weights (the DDP wrapper copies them when it wraps the "
                 "model; TODO 4)",
    "summed": "each step was world_size times too large: the gradients were summed over the "
              "ranks, not averaged, or the learning rate was multiplied by world_size (keep "
              "ex.optimizer's)",
    "too_small": "each step was world_size times too small: the learning rate was divided by "
                 "world_size, or the averaged gradients were divided again (keep "
                 "ex.optimizer's learning rate; average once)",
    "rank0": "only rank 0 should write the checkpoint: one writer, not every rank (TODO 5)",
    "module": "the checkpoint holds the DDP wrapper's names ('module.0.weight'): save the "
              "weights of the model inside the wrapper, not of the wrapper (TODO 5)",
    "teardown": "the process group is still open at the end: leave it (TODO 6)",
}


def fits(n: int, nproc: int = NPROC, batch: int = ex.PER_RANK_BATCH) -> bool:
    """A size the check may draw: it leaves a remainder over the ranks, and neither a rank's
    share rounded down nor up is a whole number of batches (so every rank ends each epoch on a
    partial batch, and shards of either length take the same number of steps)."""
    return n % nproc != 0 and (n // nproc) % batch != 0 and (-(-n // nproc)) % batch != 0


def draw_samples(rng: random.Random | None = None) -> int:
    """A fresh data set size for one check (passed to the ranks in ex.SAMPLES_ENV)."""
    return (rng or random.SystemRandom()).choice([n for n in SIZES if fits(n)])


def work_file(name: str = "exercise_ddp.py"):
    """Where the notebook writes the student's script (`%%writefile {path}`): a user folder."""
    return ranks.work_file(name)


def verdict(metrics: list[dict], exercise: str = "02-ddp", hints: dict = HINTS,
            teardown: bool = True, reference: bool = False, *, samples: int) -> Verdict:
    """solved (with the evidence), not yet (the skeleton as handed out: nothing distributed
    written) or wrong (each thing that differs) for one launch's records, whose data set held
    `samples` samples."""
    problems, summary = judge(metrics, NPROC, hints, teardown, samples=samples)
    events = [m for m in metrics if m.get("event") == "checkpoint"]
    finals = finals_of(metrics)
    started = len(finals) != NPROC or not untouched(finals, events, samples)
    return from_problems(exercise, problems, f"{summary}; each rank read its own shard of the "
                         f"{samples} samples (a size drawn for this check, not a multiple of "
                         f"{NPROC}), reshuffled every epoch; one checkpoint, written by rank 0",
                         started=started, reference=reference)


def _cause(exc, logs: dict) -> str:
    """': rank R failed first with <its error>' (the cause, before what it set off in the
    other ranks), from the log of the rank the launcher blames first; '' when none says."""
    from dltutor.launch.results import error_lines
    for rank in getattr(exc, "ranks", [])[:1]:
        try:
            tail = Path(logs[rank]).read_text(errors="replace")[-4000:]
        except (KeyError, OSError):
            return ""
        lines = error_lines(tail).strip().splitlines() if "Traceback" in tail else []
        # the exception's own line comes first: a launcher may print "Terminated" after it
        return f": rank {rank} failed first with {lines[0][:300]}" if lines else ""
    return ""


def run_and_judge(script, backend: str, args=(), hints: dict = HINTS, teardown: bool = True,
                  echo: bool = True, timeout: float = 180.0, exercise: str = "02-ddp",
                  reference: bool = False) -> bool:
    """Launch `script` on NPROC CPU ranks and show the verdict; a crash is 'wrong' (or 'not
    yet' when a TODO still raises NotImplementedError)."""
    from dltutor.launch.results import LaunchError
    from dltutor.launch.run import launch
    if ranks.missing(script):
        return not_yet(exercise, ranks.missing(script), reference=reference).show()
    samples = draw_samples()
    # each check gets its own checkpoint folder: two checks at once never share a file
    with tempfile.TemporaryDirectory(dir=work_file().parent, prefix="ckpt-") as folder:
        env = {ex.CHECKPOINT_ENV: str(Path(folder) / "checkpoint.pt"), "CUDA_VISIBLE_DEVICES": "",
               "DLTUTOR_DIST_TIMEOUT": "60", ex.SAMPLES_ENV: str(samples)}
        try:
            result = launch(script, nproc=NPROC, backend=backend, args=list(args), env=env,
                            threads=1, timeout=timeout, echo=echo)
        except LaunchError as exc:
            ran = ranks.Ran(failure=str(exc), logs=exc.result.logs if exc.result else {})
            make = not_yet if ran.unstarted else wrong
            return make(exercise, f"the script failed{_cause(exc, ran.logs)}; fix it and run "
                        f"this cell again.\n{exc}", reference=reference).show()
        return verdict(result.metrics, exercise, hints, teardown, reference,
                       samples=samples).show()


def check(script=None, solution: bool = False, echo: bool = True) -> bool:
    """Notebook 02's exercise: run `script` (the student's file) with torchrun on 2 gloo ranks."""
    if solution:
        script = course.lab("02_ddp/solutions/exercise_ddp.py")
    return run_and_judge(script if script is not None else work_file(), "local", echo=echo,
                         reference=solution)
