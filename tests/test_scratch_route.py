"""The pip route on a portal: `make setup VENV=$SCRATCH/... DLTUTOR_CACHE=$SCRATCH/...` puts the
course where it was told and nothing heavy under $HOME (quotas).

CI sets up this way (.ci/run: VENV and DLTUTOR_CACHE under $SCRATCH, outside the clone and $HOME),
so there these tests check a scratch set-up; on a laptop they check the default .venv and
~/.cache/dltutor by the same rules.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dltutor.core import env

ROOT = Path(__file__).resolve().parents[1]


def _recorded() -> Path:
    path = env.recorded_cache()
    assert path.is_file(), (f"{path} is missing: scripts/setup.sh records the cache it used there "
                            "(run `make setup`)")
    return Path(path.read_text().strip())


def _under(path, folder) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def test_the_set_up_put_the_engines_in_its_cache_and_the_kernel_in_its_venv():
    cache = _recorded()
    assert cache.is_absolute() and not _under(cache, ROOT), cache
    if os.environ.get("DLTUTOR_CACHE"):
        assert Path(os.environ["DLTUTOR_CACHE"]).resolve() == cache.resolve()
    wheels = sorted((cache / "wheels").glob("horovod-*.whl"))
    assert wheels, f"no Horovod wheel under {cache / 'wheels'}"
    ops = env.extensions_dir()
    assert _under(ops, cache) and (ops / "cpu_adam").is_dir(), ops
    assert (cache / "hub" / "venv" / "bin" / "jupyterhub").is_file()
    spec = Path(sys.prefix) / "share" / "jupyter" / "kernels" / "dltutor" / "kernel.json"
    kernel = json.loads(spec.read_text())
    assert kernel["argv"][0] == sys.executable
    assert Path(kernel["env"]["DLTUTOR_CACHE"]).resolve() == cache.resolve()
    assert _under(kernel["env"]["TORCH_EXTENSIONS_DIR"], cache)


def test_the_venv_finds_its_cache_without_the_export_and_writes_nothing_to_home(tmp_path):
    """A hub, a batch job or a new shell runs the venv's Python without DLTUTOR_CACHE: the labs,
    the kernel it installs and DeepSpeed's ops must still use the cache on scratch; the user's own
    files (launch logs) go to their own folder, and nothing is written by asking."""
    cache = _recorded()
    home = tmp_path / "home"
    home.mkdir()
    clean = {k: v for k, v in os.environ.items()
             if k not in ("DLTUTOR_CACHE", "DLTUTOR_DATA", "DLTUTOR_RUNS", "TORCH_EXTENSIONS_DIR",
                          "XDG_CACHE_HOME", "DLTUTOR_USER_DIR", "DLTUTOR_SITE")}
    code = ("import json, dltutor, os; from dltutor.core import env; from dltutor import kernel; "
            "print(json.dumps(dict(cache=str(env.cache_dir()), data=str(env.data_dir()), "
            "runs=str(env.runs_dir()), ops=os.environ['TORCH_EXTENSIONS_DIR'], "
            "kernel=kernel.kernel_env())))")
    out = subprocess.run([sys.executable, "-c", code], env={**clean, "HOME": str(home)},
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(seen["cache"]).resolve() == cache.resolve()
    for key in ("data", "ops"):
        assert _under(seen[key], cache), (key, seen[key])
    # launch logs are the user's own (a class shares the cache): their cache folder, not the set-up's
    assert Path(seen["runs"]) == home / ".cache" / "dltutor" / "runs", seen["runs"]
    assert Path(seen["kernel"]["DLTUTOR_CACHE"]).resolve() == cache.resolve()
    assert _under(seen["kernel"]["TORCH_EXTENSIONS_DIR"], cache)
    assert not any(home.iterdir()), f"written under $HOME: {list(home.iterdir())}"


def test_cache_dir_order_export_then_recorded_then_home(tmp_path, monkeypatch):
    prefix = tmp_path / "venv"
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("DLTUTOR_CACHE", raising=False)
    assert env.cache_dir() == tmp_path / "home" / ".cache" / "dltutor"
    env.recorded_cache().parent.mkdir(parents=True)
    env.recorded_cache().write_text(f"{tmp_path / 'scratch'}\n")
    assert env.cache_dir() == tmp_path / "scratch"
    monkeypatch.setenv("DLTUTOR_CACHE", str(tmp_path / "exported"))
    assert env.cache_dir() == tmp_path / "exported"


def test_ci_sets_up_by_the_scratch_route_with_the_readme_commands():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make setup-test" in ci and "make test" in ci
    assert "export VENV=" in ci and "export DLTUTOR_CACHE=" in ci and "$SCRATCH" in ci
    readme = (ROOT / "README.md").read_text()
    assert "make setup VENV=$SCRATCH/envs/dltutor-venv DLTUTOR_CACHE=$SCRATCH/dltutor-cache" in readme
