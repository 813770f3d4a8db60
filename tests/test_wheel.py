"""A wheel built from the repo works without the checkout: the doctor runs and lab 02 launches.

The wheel is installed into a fresh virtual environment (with `--no-deps`); its heavy dependencies
(torch, DeepSpeed, ...) come from the course environment through a `.pth` line, which adds their
folder to sys.path without running the course environment's editable hook, so `import dltutor`
in the fresh venv finds the installed wheel, never the checkout. Everything runs from a folder
outside the checkout, and the lab that runs is the copy inside the wheel.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(cmd, cwd, env, timeout=300):
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"   # a clean copy: no build/ left over from another build
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "runs", "checkpoints"))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(work / "dist"), str(source)], cwd=work, env=os.environ.copy())
    wheel = next((work / "dist").glob("dltutor-*.whl"))
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=work, env=os.environ.copy())
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=work, env=os.environ.copy()).strip())
    (site / "course_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DLTUTOR_COURSE")}
    _run([str(py), "-m", "pip", "install", "--no-deps", "-q", str(wheel)], cwd=work, env=env)
    return py, site, work, env


def test_the_wheel_ships_the_course_and_imports_from_itself(wheel_venv):
    py, site, work, env = wheel_venv
    probe = ("import json, dltutor; from dltutor.core import course; "
             "print(json.dumps([dltutor.__file__, str(course.course_root()), "
             "str(course.lab('02_ddp/train.py')), str(course.lab('sites/local.toml'))]))")
    pkg, root, lab, site_profile = json.loads(_run([str(py), "-c", probe], cwd=work, env=env))
    assert pkg.startswith(str(site)) and root == str(site / "dltutor" / "course"), (pkg, root)
    assert Path(lab).is_file() and Path(site_profile).is_file()
    assert not root.startswith(str(ROOT))


def test_the_installed_doctor_runs(wheel_venv):
    py, site, work, env = wheel_venv
    out = subprocess.run([str(py), "-m", "dltutor", "doctor", "--no-engines"], cwd=work, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr[-2000:]   # 1: a row says what to fix
    assert "Traceback" not in out.stderr and "torch" in out.stdout, out.stdout + out.stderr


def test_the_installed_package_launches_lab_02(wheel_venv):
    py, site, work, env = wheel_venv
    code = ("from dltutor.core.course import lab; from dltutor.launch.run import launch; "
            "r = launch(lab('02_ddp/train.py'), nproc=2, args=['--tiny', '--steps', '2'], "
            "timeout=240, echo=False); import json; "
            "print('RESULT', json.dumps([m['world_size'] for m in r.metrics] + r.command))")
    out = _run([str(py), "-c", code], cwd=work, env={**env, "DLTUTOR_OFFLINE": "1"}, timeout=300)
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    sizes_and_cmd = json.loads(line[len("RESULT "):])
    assert sizes_and_cmd[:2] == [2, 2], out[-2000:]
    assert str(site / "dltutor" / "course" / "labs" / "02_ddp" / "train.py") in sizes_and_cmd
