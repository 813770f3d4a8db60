"""ZeRO-Infinity (NVMe offload) under a student's locked-memory limit (`ulimit -l`, RLIMIT_MEMLOCK).

DeepSpeed mlock()s its NVMe swap buffers; root ignores the limit (CAP_IPC_LOCK), a student on a
hub has the default 8 MiB. Lab 04 (train_bert_ds.py) is run here as a Unix user without that
capability and with the default limit: as the student account of tests/student_kernel.py when the
tests run as root, else as the tester (who then lacks CAP_IPC_LOCK too). It must size the
buffers to fit and really swap to files, raise the soft limit to the hard one when that suffices,
and refuse a model that cannot fit with one clear error before DeepSpeed starts.
"""
from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

import student_kernel
from dltutor.zero import swap_buffers

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "course" / "labs" / "04_deepspeed"
NVME_CONFIG = LAB / "configs" / "zero3_offload_nvme.json"
DEFAULT_LIMIT = 8 * 1024 ** 2          # `ulimit -l` 8192 on Debian/Ubuntu and many JupyterHubs
SIZES = ["--dtype", "fp32", "--num_heads", "8", "--vocab", "512", "--seq_len", "16",
         "--batch_size", "2", "--num_iterations", "2", "--num_layers", "2"]
# largest tensor 320 x 1024 fp32 = 1.25 MiB: on disk (>= 1 MiB), and the least buffers (6 of it)
# fit 8 MiB; 512 x 2048 = 4 MiB needs 24 MiB
FITS = ["--h_dim", "320", "--ff_dim", "1024"]
TOO_BIG = ["--h_dim", "512", "--ff_dim", "2048"]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """How to run a command as a user without CAP_IPC_LOCK, in a folder of theirs: the student
    account when the tests run as root (a HOME made here, the lab's own DeepSpeed settings for
    them), else the tester."""
    if os.geteuid() != 0:
        yield SimpleNamespace(env=dict(os.environ), home=tmp_path_factory.mktemp("memlock"),
                              prefix=[], owner=None)
        return
    entry = student_kernel.account()
    home = student_kernel.make_home(entry)
    student_kernel.grant_traverse([sys.base_prefix, sys.prefix, ROOT, home.parent])
    env = student_kernel.student_env(os.environ, entry, home)
    env.pop("TORCH_EXTENSIONS_DIR", None)           # root's op folder: the lab picks theirs
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    try:
        yield SimpleNamespace(env=env, home=home, owner=(entry.pw_uid, entry.pw_gid), prefix=[
            setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", "--"])
    finally:
        student_kernel.release_traverse()
        shutil.rmtree(home, ignore_errors=True)


def run_lab(student, sizes, soft=DEFAULT_LIMIT, hard=DEFAULT_LIMIT):
    """train_bert_ds.py with the NVMe config, as `student`, under RLIMIT_MEMLOCK (soft, hard)."""
    nvme = Path(tempfile.mkdtemp(prefix="nvme-", dir=student.home))
    if student.owner:
        os.chown(nvme, *student.owner)
    cmd = student.prefix + [sys.executable, str(LAB / "train_bert_ds.py"), *SIZES, *sizes,
                            "--deepspeed_config", str(NVME_CONFIG), "--nvme_path", str(nvme)]
    proc = subprocess.run(cmd, env=student.env, cwd=student.home, capture_output=True, text=True,
                          timeout=600, preexec_fn=lambda: resource.setrlimit(
                              resource.RLIMIT_MEMLOCK, (soft, hard)))
    return proc, list(nvme.rglob("*.swp")), proc.stdout + proc.stderr


def metrics(text: str) -> dict:
    return json.loads(next(ln.split("DLTUTOR_METRICS", 1)[1] for ln in text.splitlines()
                           if "DLTUTOR_METRICS" in ln))


def test_nvme_offload_fits_the_default_limit_and_really_swaps(student):
    proc, swaps, text = run_lab(student, FITS)
    assert proc.returncode == 0, text[-3000:]
    assert "swap buffers sized to fit the locked-memory limit of 8 MiB (ulimit -l)" in text, text[-3000:]
    m = metrics(text)
    assert m["offload"] == "nvme" and len(m["losses"]) == 2
    assert all(math.isfinite(x) for x in m["losses"])
    # out of core for real: the big weight matrices and their Adam states are files on disk
    big = [n for n in swap_buffers.param_numels(dict(num_layers=2, h_dim=320, ff_dim=1024,
                                                     num_heads=8, vocab=512, seq_len=16))
           if n * 4 >= swap_buffers.MiB]
    on_disk = sum(f.stat().st_size for f in swaps)
    assert on_disk >= 4 * 4 * sum(big), (on_disk, len(swaps))   # weights, 2 moments (+ params)


def test_the_soft_limit_is_raised_to_the_hard_one(student):
    # 2 MiB cannot hold even the least buffers (7.5 MiB); the hard limit, 8 MiB, can
    proc, swaps, text = run_lab(student, FITS, soft=2 * 1024 ** 2)
    assert proc.returncode == 0, text[-3000:]
    assert "raised the soft locked-memory limit from 2 MiB to its hard limit, 8 MiB" in text
    assert "sized to fit the locked-memory limit of 8 MiB" in text and swaps


def test_a_model_that_cannot_fit_is_one_clear_error_before_deepspeed(student):
    proc, swaps, text = run_lab(student, TOO_BIG)
    assert proc.returncode == 2, text[-3000:]
    err = proc.stderr.strip().splitlines()[-1]
    assert "needs at least 24 MiB of locked memory" in err and "may lock only 8 MiB" in err, err
    assert "ulimit -l unlimited" in err and "smaller model" in err
    assert "Traceback" not in text and "mlock failed" not in text and not swaps


def test_sub_groups_are_deepspeeds_own():
    """The locked sizes follow DeepSpeed's optimizer sub-groups: its own function agrees."""
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3 as Stage3
    numels = swap_buffers.param_numels(dict(num_layers=2, h_dim=320, ff_dim=1024, num_heads=8,
                                            vocab=512, seq_len=16))
    params = [SimpleNamespace(partition_numel=lambda n=n: n, numel=n) for n in numels]
    for size in (1, 81_920, 327_680, 10 ** 9):
        theirs = Stage3._create_fp16_sub_groups(SimpleNamespace(sub_group_size=size), params)
        ours = swap_buffers.sub_groups(numels, size)
        assert [[p.numel for p in g] for g in theirs] == [[numels[i] for i in g] for g in ours]
