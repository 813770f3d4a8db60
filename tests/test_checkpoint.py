"""Lab 10 and dltutor.checkpoint: a stopped and resumed run equals an uninterrupted one, bit for bit.

Real 2-rank gloo runs of course/labs/10_checkpoint/train.py through dltutor.launch.run.launch,
shared between the tests (module fixtures):
  * DDP and FSDP2: 8 steps straight == stopped after step 3 + resumed to 8 (losses on every rank
    and the final parameters: largest difference 0.0);
  * a resume that leaves out the optimizer, the RNG states or the data position does not;
  * the same with --async-save (DCP async_save on a gloo group of its own);
  * reshard: FSDP2 checkpoints of 2 ranks (loaded on 3) and of 4 ranks (loaded on 2 and 3) load
    exactly, also into one process with no process group and through `format_utils dcp_to_torch`
    (model and Adam state);
  * bad input: a folder without .metadata is passed over, an empty or missing folder is a fresh
    start said in one line, another model's checkpoint is one ValueError naming the key.
"""
from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

import pytest
import torch

from dltutor.checkpoint import compare, store
from dltutor.checkpoint.state import PARTS, AppState
from dltutor.core.dist import DistContext
from dltutor.launch.run import launch

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "course" / "labs" / "10_checkpoint" / "train.py"
STEPS, STOP = 8, 3          # --tiny: 192 images, 16 per rank: 6 steps an epoch; step 3 -> 8 crosses one


def _lab_module():
    spec = importlib.util.spec_from_file_location("lab10_train", LAB)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_lab(ckpt, *args, nproc=2, params=None):
    """The lab's metrics by rank (a launch of `nproc` gloo ranks, --tiny)."""
    argv = ["--tiny", "--steps", str(STEPS), "--ckpt-dir", str(ckpt), *args]
    if params:
        argv += ["--save-params", str(params)]
    res = launch(str(LAB), nproc=nproc, args=argv, echo=False, timeout=300, oversubscribe=nproc > 2)
    return {m["rank"]: m for m in res.metrics}


def resumed_copy(src, dst, *args, params=None):
    """Resume from a copy of the stopped run's checkpoints (so each resume starts from step 3)."""
    shutil.copytree(src, dst)
    return run_lab(dst, *args, params=params)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    out = {"tmp": tmp}
    for wrap in ("ddp", "fsdp2"):
        w = ["--wrap", wrap]
        out[wrap] = dict(
            full=run_lab(tmp / f"full-{wrap}", *w, params=tmp / f"full-{wrap}.pt"),
            stop=run_lab(tmp / f"stop-{wrap}", *w, "--stop-at", str(STOP), params=tmp / f"stop-{wrap}.pt"))
        out[wrap]["resume"] = resumed_copy(tmp / f"stop-{wrap}", tmp / f"resume-{wrap}", *w,
                                           params=tmp / f"resume-{wrap}.pt")
    for left_out in ("optimizer", "rng", "data"):
        parts = ",".join(p for p in PARTS if p != left_out)
        out[f"no-{left_out}"] = resumed_copy(tmp / "stop-ddp", tmp / f"no-{left_out}", "--ckpt-parts",
                                             parts, params=tmp / f"no-{left_out}.pt")
    return out


def params(runs, name) -> dict:
    return torch.load(runs["tmp"] / f"{name}.pt", weights_only=True)


def joined_losses(stop, resume) -> dict:
    return {r: stop[r]["losses"] + resume[r]["losses"] for r in stop}


@pytest.mark.parametrize("wrap", ["ddp", "fsdp2"])
def test_stopped_and_resumed_equals_uninterrupted_bit_for_bit(runs, wrap):
    full, stop, resume = (runs[wrap][k] for k in ("full", "stop", "resume"))
    assert [stop[r]["steps"] for r in (0, 1)] == [STOP, STOP] and stop[0]["stopped_at"] == STOP
    assert stop[0]["resumed_from"] is None and resume[0]["resumed_from"] == STOP
    assert resume[0]["first_step"] == STOP and resume[0]["steps"] == STEPS
    assert full[0]["wrap"] == wrap and full[0]["losses"][0] != full[0]["losses"][-1]   # it trained
    assert joined_losses(stop, resume) == {r: full[r]["losses"] for r in full}   # every rank, exact
    diff = compare.max_abs_diff(params(runs, f"full-{wrap}"), params(runs, f"resume-{wrap}"))
    print(f"{wrap}: largest parameter difference, uninterrupted vs resumed: {diff}")
    assert diff == 0.0
    assert resume[0]["param_digest"] == full[0]["param_digest"] == full[1]["param_digest"]


@pytest.mark.parametrize("left_out", ["optimizer", "rng", "data"])
def test_a_resume_without_one_part_is_not_the_same_run(runs, left_out):
    full, stop, bad = runs["ddp"]["full"], runs["ddp"]["stop"], runs[f"no-{left_out}"]
    assert bad[0]["parts"] == [p for p in PARTS if p != left_out] and bad[0]["resumed_from"] == STOP
    assert joined_losses(stop, bad) != {r: full[r]["losses"] for r in full}, left_out
    diff = compare.max_abs_diff(params(runs, "full-ddp"), params(runs, f"no-{left_out}"))
    print(f"resumed without {left_out}: largest parameter difference {diff}")
    assert diff > 0.0, f"leaving out {left_out} changed nothing: the test cannot see that part"


def test_async_saves_on_their_own_group_resume_the_same_run(runs):
    """--async-save (DCP async_save on a gloo group of its own): stopped at 5, resumed, exact."""
    tmp, w = runs["tmp"], ["--wrap", "fsdp2", "--async-save"]
    stop = run_lab(tmp / "async", *w, "--stop-at", "5")
    resume = run_lab(tmp / "async", *w, params=tmp / "async.pt")
    full = runs["fsdp2"]["full"]
    assert resume[0]["resumed_from"] == 5 and resume[0]["async_save"] is True
    assert [s[0] for s in stop[0]["saves"]] == [2, 4, 5] and store.is_complete(tmp / "async" / "step-000008")
    assert joined_losses(stop, resume) == {r: full[r]["losses"] for r in full}
    assert compare.max_abs_diff(params(runs, "full-fsdp2"), params(runs, "async")) == 0.0


def _plain(hidden=32, layers_extra=0):
    """Lab 10's model (its own make_model), one process, with Adam."""
    lab = _lab_module()
    a = argparse.Namespace(seed=1, hidden=hidden, dropout=0.1, wrap="ddp")
    ctx = DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), is_distributed=False)
    model, _ = lab.make_model(a, ctx)
    if layers_extra:
        model.append(torch.nn.Linear(10, 10))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def _flat_optim(model, opt) -> dict:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    state = get_optimizer_state_dict(model, opt)["state"]
    return {f"{n}.{k}": v for n, s in state.items() for k, v in s.items()}


def loaded_on(src, nproc, tmp) -> dict:
    """The model of checkpoint folder `src` as `nproc` FSDP2 ranks of lab 10 load it (no steps)."""
    dst = tmp / f"on{nproc}"
    shutil.copytree(src, dst)
    got = run_lab(dst, "--wrap", "fsdp2", "--ckpt-parts", "model,optimizer", "--steps", str(STOP),
                  nproc=nproc, params=tmp / f"on{nproc}.pt")
    assert got[nproc - 1]["resumed_from"] == STOP and got[0]["world_size"] == nproc
    assert got[0]["losses"] == []
    return torch.load(tmp / f"on{nproc}.pt", weights_only=True)


def in_one_process(src, tmp) -> dict:
    """Largest differences of `src` loaded into one process with no process group, and of its
    dcp_to_torch file: {"model": ..., "torch file": ..., "Adam, one process vs torch file": ...}."""
    model, opt = _plain()
    assert store.load(src, AppState(model, opt, parts=("model", "optimizer"))) == STOP
    mine = compare.full_model_state(model)
    converted = compare.read_torch_file(compare.to_torch_file(store.newest_complete(src), tmp / "c.pt"))
    saved_optim = {f"{n}.{k}": v for n, s in converted["optimizer"]["state"].items() for k, v in s.items()}
    assert converted["step"] == STOP and any(k.endswith("exp_avg_sq") for k in saved_optim)
    return mine, converted["model"], compare.max_abs_diff(saved_optim, _flat_optim(model, opt))


@pytest.mark.parametrize("saved_on, loaded_on_ranks", [(2, (3,)), (4, (2, 3))])
def test_reshard_loads_exactly_on_other_rank_counts_one_process_and_torch_file(
        runs, tmp_path, saved_on, loaded_on_ranks):
    if saved_on == 2:
        src, stop = runs["tmp"] / "stop-fsdp2", params(runs, "stop-fsdp2")
    else:
        src = tmp_path / "stop4"
        run_lab(src, "--wrap", "fsdp2", "--stop-at", str(STOP), nproc=4, params=tmp_path / "stop4.pt")
        stop = torch.load(tmp_path / "stop4.pt", weights_only=True)
    diffs = {f"{n} ranks": compare.max_abs_diff(stop, loaded_on(src, n, tmp_path)) for n in loaded_on_ranks}
    one, converted, adam = in_one_process(src, tmp_path)
    diffs.update({"one process": compare.max_abs_diff(stop, one),
                  "dcp_to_torch": compare.max_abs_diff(stop, converted),
                  "Adam state, one process vs dcp_to_torch": adam})
    print(f"saved on {saved_on} ranks, largest difference: {diffs}")
    assert set(diffs.values()) == {0.0}, diffs


@pytest.fixture
def saved(tmp_path):
    """A 1-process checkpoint of lab 10's model at step 5, made in this process."""
    model, opt = _plain()
    app = AppState(model, opt)
    app.step = 5
    store.save(tmp_path / "ck", app)
    return tmp_path / "ck", compare.full_model_state(model)


def test_a_folder_without_metadata_is_never_loaded(saved, capsys):
    root, weights = saved
    shutil.copytree(root / "step-000005", root / "step-000009")
    (root / "step-000009" / ".metadata").unlink()          # a save killed before its last file
    assert store.newest_complete(root).name == "step-000005"
    model, opt = _plain(hidden=32)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert store.load(root, AppState(model, opt)) == 5
    assert compare.max_abs_diff(weights, compare.full_model_state(model)) == 0.0
    assert "skipping step-000009" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["empty", "missing"])
def test_no_checkpoint_is_a_fresh_start_said_once(tmp_path, capsys, where):
    root = tmp_path / "ck"
    if where == "empty":
        root.mkdir()
    model, opt = _plain()
    assert store.load(root, AppState(model, opt)) is None
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"no checkpoint in {root}: fresh start"), lines


@pytest.mark.parametrize("other, key", [
    (dict(hidden=48), "mismatched key app.model.0.weight"),
    (dict(layers_extra=1), "missing key app.model.7.weight"),
])
def test_another_models_checkpoint_is_one_error_naming_the_key(saved, other, key):
    model, opt = _plain(**other)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        store.load(saved[0], AppState(model, opt))


def test_a_checkpoint_with_a_layer_this_model_lacks_names_it(saved):
    model, _ = _plain()
    del model[6]                                             # the last Linear gone
    opt = torch.optim.Adam(model.parameters())
    with pytest.raises(ValueError, match=r"unexpected key app\.model\.6\.weight"):
        store.load(saved[0], AppState(model, opt))


def test_dcps_own_exception_becomes_the_error_naming_the_key(saved):
    """rank 3's RNG states are not in a 1-process checkpoint: DCP raises CheckpointException (a
    BaseException); load turns it into the ValueError."""
    model, opt = _plain()
    with pytest.raises(ValueError, match=r"missing key app\.rng\.rank3"):
        store.load(saved[0], AppState(model, opt, rank=3))


def test_unknown_parts_are_refused():
    model, opt = _plain()
    with pytest.raises(ValueError, match="unknown checkpoint part"):
        AppState(model, opt, parts=("model", "weights"))
