"""The notebooks run as a student (tests/student_kernel.py): run as root, nbval's kernel is a Unix
user who owns neither the environment nor the course install, and the session's folder rights are
put back. Without root there is no other account to be: these tests are skipped and say so."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import student_kernel
from dltutor.data import fashion_mnist as fm

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the student account is made by root: "
                                "run as root (CI and `make test` on the course machine do)")

PROBE = r"""
import json, os, sys, tempfile
from dltutor.core import env
def refused(folder):
    try:
        fd, path = tempfile.mkstemp(dir=folder, prefix=".student-probe-")
    except PermissionError:
        return True
    os.close(fd); os.unlink(path)
    return False
mine = env.user_folder("probe")
caps = dict(line.split(":\t") for line in open("/proc/self/status").read().splitlines()
            if line.startswith("Cap"))
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "pid": os.getpid(),
                  "effective_caps": int(caps["CapEff"], 16),
                  "home": os.environ["HOME"], "user": os.environ["USER"],
                  "attempts": os.environ["DLTUTOR_ATTEMPTS"], "user_dir": str(env.user_dir()),
                  "venv": refused(sys.prefix), "course": refused(%r),
                  "cache": refused(env.cache_dir()), "mine": not refused(mine)}))
"""


def _run(kc, code: str, timeout: float = 60) -> str:
    out = []
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda m: out.append(
        m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


@pytest.fixture(scope="module")
def student_kernel_client():
    from jupyter_client.manager import start_new_kernel
    assert os.environ.get("DLTUTOR_TEST_STUDENT") == student_kernel.ACCOUNT, \
        "tests/conftest.py did not set up the student session"
    km, kc = start_new_kernel(kernel_name=student_kernel.KERNEL, startup_timeout=120,
                              cwd=str(ROOT / "course" / "notebooks"))
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_nbval_runs_the_notebooks_in_the_student_kernel(pytestconfig):
    assert pytestconfig.option.nbval_kernel_name == student_kernel.KERNEL


def test_the_kernel_is_the_student_and_cannot_write_the_install(student_kernel_client):
    km, kc = student_kernel_client
    seen = json.loads(_run(kc, PROBE % str(ROOT / "course" / "notebooks")).strip().splitlines()[-1])
    entry = student_kernel.account()
    assert (seen["uid"], seen["euid"]) == (entry.pw_uid, entry.pw_uid) != (0, 0)
    assert seen["effective_caps"] == 0   # no root power, not even CAP_IPC_LOCK: a student's ulimit -l
    assert seen["user"] == entry.pw_name and seen["attempts"].startswith(seen["home"] + "/")
    assert Path(seen["user_dir"]).is_relative_to(seen["home"])
    # written by the student: refused in the environment, the course and the set-up's cache
    assert (seen["venv"], seen["course"], seen["cache"], seen["mine"]) == (True, True, True, True)
    # the wrapper exec'd the kernel (no fork): the process Jupyter started is the kernel itself
    assert seen["pid"] == km.provisioner.process.pid


def test_an_interrupt_reaches_the_students_kernel(student_kernel_client):
    km, kc = student_kernel_client
    msg_id = kc.execute("import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
                        "    print('interrupted')\n")
    import time
    time.sleep(2)
    km.interrupt_kernel()
    out = []
    while True:
        msg = kc.get_iopub_msg(timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    assert "interrupted" in "".join(out)


def test_the_modes_found_come_back_after_the_last_session(tmp_path, monkeypatch):
    monkeypatch.setattr(student_kernel, "GRANTS", tmp_path / "grants")
    shut = tmp_path / "shut"
    inner = shut / "inner"
    inner.mkdir(parents=True)
    os.chmod(shut, 0o700)
    os.chmod(inner, 0o750)
    granted = student_kernel.grant_traverse([inner])
    assert {str(inner), str(shut)} <= set(granted)
    assert stat.S_IMODE(shut.stat().st_mode) == 0o701 and stat.S_IMODE(inner.stat().st_mode) == 0o751
    # a second session that still runs keeps them; a session that was killed does not
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=60).stdout.strip()
    (tmp_path / "grants" / f"session-{done}").touch()
    other = tmp_path / "grants" / f"session-{os.getppid()}"
    other.touch()
    assert student_kernel.release_traverse() == []
    assert stat.S_IMODE(shut.stat().st_mode) == 0o701
    other.unlink()
    (tmp_path / "grants" / f"session-{os.getpid()}").touch()
    assert sorted(student_kernel.release_traverse()) == sorted(granted)
    assert stat.S_IMODE(shut.stat().st_mode) == 0o700 and stat.S_IMODE(inner.stat().st_mode) == 0o750
    os.chmod(shut, 0o755)


FASHION_PROBE = r"""
import json, os
from dltutor.core import env
from dltutor.data import fashion_mnist as fm, roots
from dltutor.io import source
os.environ["DLTUTOR_DATA"] = %r
try:
    train, test = fm.load(env.data_dir())
    images, labels = source.load(16)
    print(json.dumps({"train": len(train), "io": len(images), "own": str(roots.own_data_dir()),
                      "read_from": str(fm.prepared_root(env.data_dir()))}))
finally:
    del os.environ["DLTUTOR_DATA"]
"""


@pytest.fixture
def shared_data():
    """A folder of root's (0755, outside root's own temp folders): the student reads, never writes."""
    import shutil
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="dltutor-shared-data-", dir="/tmp"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_read_only_data_folder_is_read_or_prepared_in_the_students_own(student_kernel_client,
                                                                        shared_data):
    assert fm.source_dir() is not None, \
        "Fashion-MNIST's idx files are missing: `bash scripts/setup.sh` installs dataset-fashion-mnist"
    km, kc = student_kernel_client
    (shared_data / "empty").mkdir()
    fm.prepare(fm.source_dir(), shared_data / "prepared")
    for folder in [shared_data, *(p for p in shared_data.rglob("*") if p.is_dir())]:
        os.chmod(folder, 0o755)
    seen = [json.loads(_run(kc, FASHION_PROBE % str(shared_data / name)).strip().splitlines()[-1])
            for name in ("empty", "prepared")]
    # not prepared in the shared folder: prepared once in the student's own, both readers use it
    assert seen[0]["read_from"] == seen[0]["own"] and (seen[0]["train"], seen[0]["io"]) == (60000, 16)
    assert not any((shared_data / "empty").iterdir())
    # prepared by the set-up: read there
    assert seen[1]["read_from"] == str(shared_data / "prepared") and seen[1]["train"] == 60000


OPS_PROBE = r"""
import json, os, time
import dltutor
from dltutor.core import engines
engines.apply_engine_env()
from deepspeed.ops.op_builder import CPUAdamBuilder
folder = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], "cpu_adam")
start = time.time()
CPUAdamBuilder().load(verbose=False)
def mtime(name):
    return os.stat(os.path.join(folder, name)).st_mtime
print(json.dumps({"folder": folder, "so_mtime": mtime("cpu_adam.so"),
                  "newer": [n for n in os.listdir(folder) if n != "lock" and mtime(n) > start]}))
"""


def test_the_shared_deepspeed_ops_load_in_the_students_copy_without_a_build(student_kernel_client):
    from dltutor.core import env
    kernel_env = json.loads((Path(os.environ["JUPYTER_PATH"].split(os.pathsep)[0]) / "kernels" /
                             student_kernel.KERNEL / "kernel.json").read_text())["env"]
    shared = Path(kernel_env.get("TORCH_EXTENSIONS_DIR") or env.extensions_dir()) / "cpu_adam"
    assert (shared / "cpu_adam.so").is_file(), \
        f"DeepSpeed's cpu_adam is not built in {shared.parent}: run `bash scripts/setup.sh`"
    km, kc = student_kernel_client
    seen = json.loads(_run(kc, OPS_PROBE, timeout=300).strip().splitlines()[-1])
    assert not Path(seen["folder"]).is_relative_to(shared.parent), seen   # the student's copy
    # loaded as the set-up built it: the load wrote nothing but its lock file (no compile, no link)
    assert seen["so_mtime"] == (shared / "cpu_adam.so").stat().st_mtime and seen["newer"] == []
