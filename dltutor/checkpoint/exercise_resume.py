"""Notebook 10's exercise: save and resume, so that a killed run ends bit-identical.

The student writes `MyAppState(model, optimizer, loop)`, a DCP `Stateful` (state_dict /
load_state_dict, through torch.distributed.checkpoint.state_dict's get_state_dict/set_state_dict)
that holds the model, the optimizer, the step, this rank's RNG states and the data position
(`loop.epoch`, the sampler's epoch, and `loop.offset`, the batches done in it), in a script that
ends with `run(MyAppState)`. The training is lab 10's (course/labs/10_checkpoint/train.py --tiny:
its Fashion-MNIST subset, MLP with dropout, DDP, Adam, DistributedSampler and `batches`), on 2
gloo ranks, plus a left-right flip of each batch drawn from Python's `random`: dropout draws from
torch's generator, the flip from Python's, so both matter. STEPS steps, a checkpoint
(`dcp.save({"app": app})` into step-N folders, dltutor.checkpoint.store) every SAVE_EVERY.

`check(path)` draws, per attempt and unseen, a seed and how the run ends early: one rank SIGKILLs
itself after step S (`mode` "kill": the job dies; the newest complete checkpoint is older) or both
ranks save at step S and exit (`mode` "stop": a job at its time limit). Launch 1: the harness's
own uninterrupted run (every step's state reported), then the student's run until it dies or
stops. Launch 2: a new run that loads the newest complete checkpoint through the student's
`load_state_dict`, reports each piece of its state (parameters, Adam's state, each RNG, the data
position, the step) and trains to the end. `resume_judge.judge` compares that with the
uninterrupted run's state at the checkpoint's step, then the losses and final parameters.
S is drawn so that the checkpoint resumed from is past the first epoch and inside an epoch (epoch
and offset both differ from a fresh start's). `play` runs both halves in one process (a stop
and a fresh build): the mutation tests judge every answer in one launch with it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import tempfile
from pathlib import Path

from dltutor.checkpoint import compare, restarts, store
from dltutor.checkpoint.resume_judge import judge, launch_problems
from dltutor.core import course
from dltutor.grading import ranks
from dltutor.grading.verdict import from_problems, not_yet

EXERCISE = "10-resume"
NPROC, STEPS, SAVE_EVERY = 2, 18, 5
PLAN_ENV = "DLTUTOR_EXERCISE_RESUME"
PLAN_FILE = "plan.json"
LAB = "10_checkpoint/train.py"
SOLUTION = "10_checkpoint/solutions/app_state.py"
_LAB = {}


class Loop:
    """Where the training stands; the student's app state saves these and sets them back."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.step = 0          # optimizer steps done
        self.epoch = 0         # the sampler's epoch (DistributedSampler.set_epoch)
        self.offset = 0        # batches of that epoch done


# ------------------------------------------------------------------ the plan (in the kernel)
def batches_per_epoch() -> int:
    t = lab().TINY
    return t["train_subset"] // NPROC // t["batch_size"]


def stop_steps(mode: str) -> list[int]:
    """The steps S a run may die or stop after: the checkpoint resumed from is past the first
    epoch and not at an epoch's start (a resume without the epoch or the offset shows)."""
    per = batches_per_epoch()
    resumed = (lambda s: s - s % SAVE_EVERY) if mode == "kill" else (lambda s: s)
    return [s for s in range(1, STEPS) if resumed(s) > per and resumed(s) % per]


def make_plan(folder, seed: int | None = None, mode: str | None = None) -> dict:
    """A fresh unseen plan (seeded per attempt unless `seed` is given), written to plan.json."""
    pick = random.Random(seed) if seed is not None else random.SystemRandom()
    mode = mode or pick.choice(("kill", "stop"))
    plan = {"seed": pick.randrange(1, 10 ** 6), "mode": mode, "step": pick.choice(stop_steps(mode)),
            "rank": pick.randrange(NPROC), "root": str(Path(folder) / "ckpt"), "phase": "first"}
    write_plan(folder, plan)
    return plan


def write_plan(folder, plan: dict) -> None:
    (Path(folder) / PLAN_FILE).write_text(json.dumps(plan))


def load_plan() -> dict:
    folder = os.environ.get(PLAN_ENV)
    if not folder:
        raise RuntimeError(f"${PLAN_ENV} is not set: the check (dltutor.checkpoint."
                           "exercise_resume.check) writes the plan and sets it")
    return json.loads((Path(folder) / PLAN_FILE).read_text())


# ------------------------------------------------------------------ inside the launched ranks
def lab():
    """Lab 10's train.py as a module (its data, model and batch stream, not copied here)."""
    if "lab" not in _LAB:
        spec = importlib.util.spec_from_file_location("dltutor_lab10_train", course.lab(LAB))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _LAB["lab"] = module
    return _LAB["lab"]


class Run:
    """One training run as a (re)started job builds it: model, Adam, sampler, loop, seeded RNGs."""

    def __init__(self, seed: int, ctx):
        import torch
        from torch.utils.data.distributed import DistributedSampler

        from dltutor.core import dist
        L = lab()
        self.a = L.parse_args(["--tiny", "--seed", str(seed)])
        self.x, self.y = L.load_data(self.a.train_subset)
        self.sampler = DistributedSampler(range(len(self.x)), num_replicas=ctx.world_size,
                                          rank=ctx.rank, shuffle=True, seed=seed, drop_last=True)
        self.model, _ = L.make_model(self.a, ctx)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=self.a.lr)
        dist.seed(seed)                                  # python, numpy, torch: seed + rank
        self.loop, self.losses = Loop(ctx.rank, ctx.world_size), []

    def train(self, end: int, after_step=None) -> None:
        """Steps from the loop's position until loop.step == end; after_step(self) after each."""
        from dltutor.core.train_step import train_step
        stream = lab().batches(self.sampler, self.a.batch_size, self.loop.epoch, self.loop.offset)
        while self.loop.step < end:
            idx, after = next(stream)
            x = self.x[idx]
            if random.random() < 0.5:                    # augmentation from Python's RNG
                x = x.view(-1, 28, 28).flip(-1).reshape(len(idx), -1)
            loss, _ = train_step(self.model, self.opt, x, self.y[idx])
            self.loop.step += 1
            self.loop.epoch, self.loop.offset = after["epoch"], after["offset"]
            self.losses.append(loss.item())
            if after_step is not None:
                after_step(self)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensors(obj, prefix: str = "") -> dict:
    """Every tensor and number inside nested dicts/lists, by path (numbers as float64 tensors)."""
    import torch
    if isinstance(obj, torch.Tensor):
        return {prefix: obj.reshape(-1)}     # compare.digest views bytes: no 0-d tensors
    if isinstance(obj, (bool, int, float)):
        return {prefix: torch.tensor([float(obj)], dtype=torch.float64)}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(
        obj, (list, tuple)) else ()
    return {k: v for key, val in items for k, v in _tensors(val, f"{prefix}.{key}").items()}


def probe(run: Run) -> dict:
    """Digests of each piece of state a resume must restore, and the loop's position."""
    import torch
    opt = run.opt.state_dict()     # not get_optimizer_state_dict: on an empty Adam it takes a step
    moments = [t for s in opt["state"].values() for k, t in s.items() if k != "step"]
    return dict(step=run.loop.step, epoch=run.loop.epoch, offset=run.loop.offset,
                params=compare.digest(compare.full_model_state(run.model)),
                optimizer=compare.digest(_tensors(opt)),
                optimizer_fresh=not any(bool(t.any()) for t in moments),
                torch_rng=_sha(torch.get_rng_state().numpy().tobytes()),
                python_rng=_sha(repr(random.getstate()).encode()))


def reference(plan: dict, ctx, tag: str = "reference") -> None:
    """The harness's own uninterrupted run: every step's state (step 0 too) and loss."""
    from dltutor.core import dist
    run, probes = Run(plan["seed"], ctx), []
    probes.append(probe(run))
    run.train(STEPS, lambda r: probes.append(probe(r)))
    dist.report(event="reference", tag=tag, probes=probes, losses=run.losses,
                final=probes[-1]["params"])


def _student(what: str, tag, fn):
    """Call the student's code; an exception is reported (what, when) and raised again."""
    from torch.distributed.checkpoint.api import CheckpointException
    try:
        return fn()
    except NotImplementedError:
        raise                              # a TODO: the check says "not yet"
    except (Exception, CheckpointException) as exc:   # DCP's is a BaseException
        ranks.report_error(exc, where=what, **({"tag": tag} if tag else {}))
        raise


def first(app_cls, plan: dict, ctx, tag=None) -> None:
    """The student's run: saves every SAVE_EVERY steps; dies (SIGKILL) or stops after plan's step."""
    import torch.distributed.checkpoint as dcp

    from dltutor.core import dist
    run, root, S = Run(plan["seed"], ctx), plan["root"], plan["step"]
    app = _student("MyAppState(model, optimizer, loop)", tag,
                   lambda: app_cls(run.model, run.opt, run.loop))

    def after_step(r):
        step = r.loop.step
        if step % SAVE_EVERY == 0 or (plan["mode"] == "stop" and step == S):
            _student(f"saving step {step} (your state_dict)", tag, lambda: dcp.save(  # DCP:
                {store.KEY: app}, checkpoint_id=str(store.step_dir(root, step))))
        if plan["mode"] == "kill" and step == S and ctx.rank == plan["rank"]:
            dist.report(event="killed", tag=tag, step=step)
            restarts.kill_now(root, step, ctx.rank)      # SIGKILL: no cleanup, no last save

    run.train(S, after_step)
    dist.report(event="stopped", tag=tag, step=S)


def resume(app_cls, plan: dict, ctx, tag=None) -> None:
    """A new run: the newest complete checkpoint through the student's load_state_dict, each piece
    of state reported, then training to STEPS."""
    import torch.distributed as tdist
    import torch.distributed.checkpoint as dcp

    from dltutor.core import dist
    run = Run(plan["seed"], ctx)
    app = _student("MyAppState(model, optimizer, loop)", tag,
                   lambda: app_cls(run.model, run.opt, run.loop))
    path = store.newest_complete(plan["root"])
    if path is not None:
        _student(f"loading {path.name} (your load_state_dict)", tag,
                 lambda: dcp.load({store.KEY: app}, checkpoint_id=str(path)))  # DCP:
    dist.report(event="resumed", tag=tag, checkpoint=path and path.name, probe=probe(run))
    steps = [None] * ctx.world_size
    tdist.all_gather_object(steps, run.loop.step)        # ranks at other steps would hang
    if len(set(steps)) > 1:
        dist.report(event="end", tag=tag, apart=steps)
        return
    run.train(STEPS)
    dist.report(event="end", tag=tag, first_step=STEPS - len(run.losses), losses=run.losses,
                final=probe(run)["params"])


def run(app_cls) -> None:
    """The student's script's last line: this launch's half of the check's plan."""
    from dltutor.core import dist
    with dist.session() as ctx:
        plan = load_plan()
        if plan["phase"] == "first":
            reference(plan, ctx)
            first(app_cls, plan, ctx)
        else:
            resume(app_cls, plan, ctx)


def play(app_cls, plan: dict, ctx, tag: str) -> None:
    """Both halves in this process (a stop, then a fresh build and the resume), tagged: one launch
    judges many answers (tests/test_mutations_checkpoint.py)."""
    mine = dict(plan, mode="stop", root=str(Path(plan["root"]) / tag))
    first(app_cls, mine, ctx, tag)
    resume(app_cls, mine, ctx, tag)


# ------------------------------------------------------------------ in the kernel
def work_file(name: str = "app_state.py") -> Path:
    """Where the notebook writes the student's script (`%%writefile {path}`)."""
    return ranks.work_file(name)


def check(script=None, solution: bool = False, echo: bool = False, timeout: float = 120.0,
          seed: int | None = None, mode: str | None = None) -> bool:
    """Run `script` on 2 gloo ranks, kill or stop it at an unseen step, resume it, print the verdict."""
    script = course.lab(SOLUTION) if solution else script if script is not None else work_file()
    absent = ranks.missing(script)
    if absent:
        return not_yet(EXERCISE, absent, reference=solution).show()
    with tempfile.TemporaryDirectory(prefix="dltutor-resume-") as folder:
        plan = make_plan(folder, seed, mode)
        env = {PLAN_ENV: folder}
        ran = ranks.run_on_ranks(script, NPROC, env=env, timeout=timeout, echo=echo)
        if ran.unstarted:
            return not_yet(EXERCISE, "MyAppState still raises NotImplementedError: fill in the "
                           "TODOs of state_dict and load_state_dict", reference=solution).show()
        records, problems = list(ran.metrics), launch_problems(ran, plan, "first")
        if not problems:
            write_plan(folder, dict(plan, phase="resume"))
            again = ranks.run_on_ranks(script, NPROC, env=env, timeout=timeout, echo=echo)
            records += again.metrics
            problems = launch_problems(again, plan, "resume")
    if not problems:
        problems, summary = judge(records, plan)
    return from_problems(EXERCISE, problems, "" if problems else summary,
                         reference=solution).show()
