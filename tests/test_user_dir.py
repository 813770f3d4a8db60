"""Shared and read-only apart from per user and writable (issue #44): where each kind of file goes.

The set-up's cache (wheels, compiled ops, data) and the installed course are shared by a class and
may be read-only; exercise work files, launch logs, figures and the user's copy of the compiled ops
are the user's own: `DLTUTOR_USER_DIR`, else the site profile's scratch with the user's name, else
`$XDG_CACHE_HOME/dltutor` — never the set-up's recorded cache.
"""
import os
from pathlib import Path

import pytest

from dltutor import kernel
from dltutor.core import env
from dltutor.grading import ranks


@pytest.fixture
def clean(monkeypatch, tmp_path):
    for name in ("DLTUTOR_USER_DIR", "DLTUTOR_SITE", "DLTUTOR_RUNS", "XDG_CACHE_HOME",
                 "TORCH_EXTENSIONS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DLTUTOR_CACHE", str(tmp_path / "shared-cache"))
    return monkeypatch


def test_the_users_files_go_to_their_own_folder_never_the_set_ups_cache(clean, tmp_path):
    home = tmp_path / "home"
    assert env.user_dir() == home / ".cache" / "dltutor"
    assert env.runs_dir() == home / ".cache" / "dltutor" / "runs"
    assert ranks.work_file("x.py") == home / ".cache" / "dltutor" / "exercises" / "x.py"
    assert env.figures_dir("06") == home / ".cache" / "dltutor" / "figures" / "06"
    for path in (env.user_dir(), env.runs_dir()):
        assert tmp_path / "shared-cache" not in path.parents
    clean.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert env.user_dir() == tmp_path / "xdg" / "dltutor"
    clean.setenv("DLTUTOR_USER_DIR", str(tmp_path / "mine"))
    assert env.runs_dir() == tmp_path / "mine" / "runs"


def test_a_site_profile_puts_the_users_folder_on_its_scratch_with_the_users_name(clean, tmp_path):
    clean.setenv("DLTUTOR_SITE", "local")                     # scratch = "${TMPDIR:-/tmp}/dltutor"
    clean.setenv("TMPDIR", str(tmp_path / "scratch"))
    assert env.user_dir() == tmp_path / "scratch" / "dltutor" / env.user_name()
    clean.delenv("TMPDIR")
    assert env.user_dir() == Path("/tmp/dltutor") / env.user_name()
    clean.setenv("DLTUTOR_SITE", "frontera")                  # scratch = "$SCRATCH/dltutor"
    clean.delenv("SCRATCH", raising=False)
    assert env.user_dir() == tmp_path / "home" / ".cache" / "dltutor"   # $SCRATCH unset here
    clean.setenv("SCRATCH", str(tmp_path / "S"))
    assert env.user_dir() == tmp_path / "S" / "dltutor" / env.user_name()


def test_a_folder_that_cannot_be_written_is_one_clear_error(clean, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    clean.setenv("DLTUTOR_USER_DIR", str(blocker / "sub"))
    with pytest.raises(PermissionError, match="DLTUTOR_USER_DIR"):
        env.user_folder("exercises")


def test_a_shared_read_only_ops_folder_becomes_the_users_copy(clean, tmp_path):
    shared = tmp_path / "shared-ops" / "env-x"
    op = shared / "cpu_adam"
    op.mkdir(parents=True)
    for name, text in (("cpu_adam.so", "so"), ("cpu_adam.o", "obj"), ("build.ninja", "rules"),
                       ("lock", "")):
        (op / name).write_text(text)
    clean.setenv("TORCH_EXTENSIONS_DIR", str(shared))
    assert env.extensions_dir() == shared                     # writable: used as it is
    os.chmod(shared, 0o555)
    try:
        if os.access(shared, os.W_OK):                        # root writes anyway: say we cannot
            clean.setattr(env, "writable", lambda folder: False)
        mine = env.extensions_dir()
    finally:
        os.chmod(shared, 0o755)
    assert tmp_path / "home" / ".cache" / "dltutor" in mine.parents
    copied = mine / "cpu_adam"
    assert (copied / "cpu_adam.so").read_text() == "so" and not (copied / "cpu_adam.so").is_symlink()
    assert (copied / "cpu_adam.o").is_symlink() and (copied / "cpu_adam.o").read_text() == "obj"
    assert not (copied / "lock").exists()                    # the lock is the user's own, later
    assert (copied / "cpu_adam.so").stat().st_mtime == (op / "cpu_adam.so").stat().st_mtime


def test_a_shared_kernel_never_carries_one_users_folder(clean, tmp_path):
    clean.setenv("DLTUTOR_USER_DIR", str(tmp_path / "mine"))
    clean.setenv("DLTUTOR_SITE", "local")
    assert kernel.kernel_env("user")["DLTUTOR_USER_DIR"] == str(tmp_path / "mine")
    shared = kernel.kernel_env("sys-prefix")
    assert "DLTUTOR_USER_DIR" not in shared and shared["DLTUTOR_SITE"] == "local"


def test_the_doctor_names_your_folder_and_says_when_you_cannot_write_it(clean, tmp_path):
    from dltutor import doctor
    clean.setenv("DLTUTOR_USER_DIR", str(tmp_path / "mine"))
    row = doctor._user_row()
    assert row.status == doctor.OK and str(tmp_path / "mine") in row.value
    (tmp_path / "file").write_text("")
    clean.setenv("DLTUTOR_USER_DIR", str(tmp_path / "file" / "sub"))
    row = doctor._user_row()
    assert row.status == doctor.PROBLEM and "DLTUTOR_USER_DIR" in row.fix


def test_a_launch_whose_log_folder_cannot_be_made_says_what_to_set(clean, tmp_path):
    from dltutor.launch.run import launch
    (tmp_path / "file").write_text("")
    clean.setenv("DLTUTOR_USER_DIR", str(tmp_path / "file" / "sub"))
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    with pytest.raises(PermissionError, match="set DLTUTOR_USER_DIR"):
        launch(script, nproc=1, backend="python", timeout=60)
