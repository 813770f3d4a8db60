"""Lab 10 under `torchrun --max-restarts 1`: a rank killed mid-run, and a save killed mid-write.

Real 2-rank gloo runs through torchrun (dltutor.checkpoint.restarts.torchrun, with
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1): an uninterrupted run, a run whose rank 1 SIGKILLs itself
after step 5, and a run whose rank 0 dies inside step 6's save before `.metadata`. Both restarted
runs end with the uninterrupted run's parameters (largest difference 0.0) and losses, report one
restart, the step they resumed from, the steps redone and the seconds from the kill to training.
No retries: a restart that fails fails the test (the launcher's output is in the message).
"""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dltutor.checkpoint import compare, restarts

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "course" / "labs" / "10_checkpoint" / "train.py"
STEPS, SAVE_EVERY = 8, 2     # --tiny: saves at 2, 4, 6, 8
KILL_AT, TORN_AT = 5, 6      # rank 1 dies after step 5 (newest complete: 4); the save of 6 is torn


def run(tmp, name, *args) -> dict:
    """The lab under torchrun with one restart allowed; its result (rc 0 required)."""
    argv = ["--tiny", "--steps", STEPS, "--save-every", SAVE_EVERY, "--ckpt-dir", tmp / name,
            "--save-params", tmp / f"{name}.pt", *args]
    res = restarts.torchrun(LAB, 2, argv, log_dir=tmp / f"{name}-logs", timeout=240)
    assert res["rc"] == 0 and set(res["metrics"]) == {0, 1}, res["output"][-4000:]
    return res


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("restarts")
    return {"tmp": tmp, "full": run(tmp, "full"),
            "killed": run(tmp, "killed", "--kill-at", KILL_AT, "--kill-rank", 1),
            "torn": run(tmp, "torn", "--kill-during-save", TORN_AT)}


def largest_difference(runs, name) -> float:
    load = lambda n: torch.load(runs["tmp"] / f"{n}.pt", weights_only=True)  # noqa: E731
    return compare.max_abs_diff(load("full"), load(name))


def test_an_uninterrupted_run_under_torchrun_has_no_restart(runs):
    m = runs["full"]["metrics"]
    assert [m[r]["restart_count"] for r in (0, 1)] == [0, 0] and m[0]["max_restarts"] == 1
    assert m[0]["resumed_from"] is None and "killed_step" not in m[0] and m[0]["skipped"] == {}


@pytest.mark.parametrize("name, killed_rank, resumed, torn", [
    ("killed", 1, 4, {}),
    ("torn", 0, 4, {"step-000006": ["__0_0.distcp", "__1_0.distcp"]}),
])
def test_a_killed_rank_restarts_from_the_newest_complete_checkpoint_bit_for_bit(
        runs, name, killed_rank, resumed, torn):
    res, full = runs[name], runs["full"]["metrics"]
    m = res["metrics"]
    killed_step = KILL_AT if name == "killed" else TORN_AT
    assert f"failed (exitcode: -9) local_rank: {killed_rank}" in res["launcher"], res["launcher"]
    for r in (0, 1):
        assert m[r]["restart_count"] == 1 and m[r]["resumed_from"] == resumed, m[r]
        assert (m[r]["killed_step"], m[r]["killed_rank"]) == (killed_step, killed_rank)
        assert m[r]["steps_redone"] == killed_step - resumed
        assert m[r]["losses"] == full[r]["losses"][resumed:]         # the same steps, exactly
        assert m[r]["skipped"] == torn                                # shards there, no .metadata
        assert m[r]["kill_to_training_s"] > 0 and math.isfinite(m[r]["kill_to_training_s"])
    diff = largest_difference(runs, name)
    print(f"{name}: restarts {m[0]['restart_count']}, resumed from {resumed}, steps redone "
          f"{m[0]['steps_redone']}, kill to training {m[0]['kill_to_training_s']:.2f} s, "
          f"largest parameter difference {diff}")
    assert diff == 0.0 and m[0]["param_digest"] == full[0]["param_digest"]


def test_the_resume_names_the_torn_folder(runs):
    out = runs["torn"]["output"]
    assert "skipping step-000006" in out and "no .metadata" in out
    assert "resumed from step 4" in out


def test_the_torn_writer_leaves_shards_and_no_metadata(tmp_path):
    """TornWriter in a child process (it SIGKILLs itself): step 3's folder keeps the shard, has no
    .metadata, is not loaded, and the kill file says where it died."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "import torch\nfrom dltutor.checkpoint import restarts, store\n"
            "from dltutor.checkpoint.state import AppState\n"
            "m = torch.nn.Linear(4, 2); app = AppState(m, torch.optim.Adam(m.parameters()))\n"
            f"root = {str(tmp_path)!r}; app.step = 3\n"
            "store.save(root, app, restarts.TornWriter(store.step_dir(root, 3), root, 3, 0))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr[-2000:]
    folder = tmp_path / "step-000003"
    assert sorted(p.name for p in folder.iterdir()) == ["__0_0.distcp"]
    assert restarts.read_kill(tmp_path)["where"] == "inside the save, before .metadata"
    from dltutor.checkpoint import store
    assert store.newest_complete(tmp_path) is None and store.torn(tmp_path) == ["step-000003"]


def test_restart_count_reads_torchruns_variable():
    assert restarts.restart_count({}) == 0
    assert restarts.restart_count({"TORCHELASTIC_RESTART_COUNT": "2"}) == 2


def test_the_restart_command_uses_only_flags_torch_2_11_and_this_torch_know(tmp_path):
    cmd = restarts.torchrun_command("/x/lab.py", 2, ["--tiny"], port=29500, log_dir=tmp_path)
    used = {a for a in cmd[:cmd.index("/x/lab.py")] if a.startswith("--")}
    seen = (ROOT / "tests" / "seen" / "torchrun_help_torch2.11.txt").read_text()
    here = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"],
                          capture_output=True, text=True, timeout=120).stdout
    for helptext in (seen, here):
        known = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", helptext))
        assert used <= known, used - known
    assert "--max-restarts" in used and cmd[cmd.index("--max-restarts") + 1] == "1"
    assert restarts.RESTART_ENV == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
