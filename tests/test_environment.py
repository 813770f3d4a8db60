"""The environment files agree, the doctor renders and flags problems, notebooks carry no outputs."""
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONDA_TO_PIP = {"pytorch": "torch"}
CONDA_TOOLCHAIN = {"python", "pip", "cmake", "cxx-compiler"}   # what conda adds beyond pyproject


def _name(spec: str) -> tuple[str, str]:
    m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(.*)", spec)
    name = m.group(1).lower().replace("_", "-")
    pins = m.group(2).replace(" ", "")
    pins = "==" + pins[1:] if pins.startswith("=") and not pins.startswith("==") else pins
    return CONDA_TO_PIP.get(name, name), pins


def _pyproject_packages() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return dict(_name(s) for s in specs)


def _conda_file() -> tuple[dict[str, str], list[str]]:
    """(conda packages, pip lines) of environment.yml."""
    conda, pip, section = {}, [], None
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if line.startswith("dependencies:"):
            section = "conda"
        elif section and re.match(r"^  - pip:\s*$", line):
            section = "pip"
        elif section == "conda" and re.match(r"^  - [^ ]", line):
            name, pins = _name(line.strip()[2:])
            conda[name] = pins
        elif section == "pip" and re.match(r"^      - ", line):
            pip.append(line.strip()[2:])
    return conda, pip


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_environment_yml_installs_the_pinned_course():
    """conda-forge gives only what it surely has (Python and the build toolchain); every Python
    package, torch included, comes through pip with the tested pins, as on the pip route."""
    conda, pip = _conda_file()
    assert set(conda) == CONDA_TOOLCHAIN, (
        f"environment.yml takes {sorted(set(conda) - CONDA_TOOLCHAIN)} from conda-forge; only "
        "python and the build toolchain come from conda (conda-forge lags the pinned torch)")
    assert conda["python"] == "==3.11"
    assert pip == ["-c constraints.txt", "-e ."], pip
    pins, project = _constraints(), _pyproject_packages()
    for name in ("torch", "torchvision"):
        assert project[name] == "==" + pins[name], f"{name}: pyproject {project[name]}, pinned {pins[name]}"
    text = (ROOT / "environment.yml").read_text()
    assert 'bash scripts/build_horovod.sh "$CONDA_PREFIX/bin/python"' in text


def test_constraints_pin_every_course_package_within_pyproject():
    from packaging.specifiers import SpecifierSet
    pins, project = _constraints(), _pyproject_packages()
    unpinned = sorted(set(project) - set(pins) - {"horovod"})   # horovod: built from its sdist
    assert not unpinned, f"constraints.txt lacks {unpinned}: run `make constraints`"
    wrong = {n: (project[n], pins[n]) for n in project if n in pins
             and pins[n] not in SpecifierSet(project[n])}
    assert not wrong, f"constraints.txt contradicts pyproject: {wrong}"
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-c constraints.txt" in setup and "constraints.txt" in setup.split("want=")[1].split("\n")[0]


def test_the_venv_has_the_pinned_versions():
    from importlib.metadata import version
    pins = _constraints()
    for name in ("torch", "deepspeed", "jupyterlab", "ipywidgets", "nbval", "papermill", "numpy"):
        assert version(name).split("+")[0] == pins[name], f"{name} is not the pinned {pins[name]}"


def test_torch_is_the_pinned_build():
    import torch
    import torchvision
    assert torch.__version__.split("+")[0] == "2.14.1"
    assert torchvision.__version__.split("+")[0] == "0.29.1"


def test_committed_notebooks_have_no_outputs():
    files = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    assert files, "no notebooks are tracked"
    dirty = []
    for f in files:
        nb = json.loads((ROOT / f).read_text())
        if any(c.get("outputs") or c.get("execution_count") for c in nb["cells"]
               if c["cell_type"] == "code"):
            dirty.append(f)
    assert not dirty, f"notebooks committed with outputs: {dirty} — run `make clean-notebooks`"


def test_notebooks_open_with_parameters_and_doctor():
    for path in sorted((ROOT / "course" / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        assert nb["metadata"]["kernelspec"]["name"] == "dltutor", path.name   # no prompt
        text = "".join("".join(c["source"]) for c in nb["cells"][:4] if c["cell_type"] == "markdown")
        assert "python -m dltutor kernel install" in text, f"{path.name}: no fix for a missing kernel"
        for heading in ("What you'll do", "What you'll learn", "What you need"):
            assert heading in text, f"{path.name}: first cells lack '{heading}'"
        tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
        assert any("doctor()" in "".join(c["source"]) for c in nb["cells"][:8]), path.name


def test_doctor_table_and_cli(tmp_path):
    env = {"DLTUTOR_DATA": str(tmp_path / "data"), "PATH": "/usr/bin:/bin",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "c001", "SLURM_PROCID": "3", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "dltutor", "doctor"], env=env,
                         capture_output=True, text=True, timeout=120)
    text = out.stdout
    for row in ("torch", "backend gloo", "horovod", "deepspeed", "CPU cores", "data dir",
                "fast mode", "Slurm allocation", "job_id=4242"):
        assert row in text, f"doctor lacks {row!r}:\n{text}\n{out.stderr}"
    assert "procid" not in text.lower(), "the doctor must not report rank variables"
    assert out.returncode == (1 if "!!" in text else 0)


def test_doctor_flags_a_missing_engine(monkeypatch, capsys):
    from dltutor.core import engines
    from dltutor import doctor
    monkeypatch.setattr(engines, "horovod_info",
                        lambda: {"importable": False, "fix": "bash scripts/build_horovod.sh .venv/bin/python"})
    rows = doctor.doctor()
    bad = [r for r in rows if r.name == "horovod"]
    assert bad and bad[0].status == doctor.PROBLEM and "build_horovod" in bad[0].fix
    assert "-> bash scripts/build_horovod.sh" in capsys.readouterr().out


def test_cli_data_stage_needs_a_source():
    out = subprocess.run([sys.executable, "-m", "dltutor", "data", "stage"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--from DIR" in out.stderr


def test_kernel_install_writes_the_labs_settings_and_uninstall_removes_it(tmp_path, monkeypatch):
    from dltutor import cli
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "user"))   # a user install, as on a hub
    monkeypatch.setenv("DLTUTOR_DATA", str(tmp_path / "scratch-data"))
    assert cli.main(["kernel", "install", "--name", "dltutor-test"]) == 0
    spec = json.loads((tmp_path / "user/kernels/dltutor-test/kernel.json").read_text())
    assert spec["argv"][0] == sys.executable and spec["display_name"] == "Python (dltutor)"
    assert spec["env"]["DLTUTOR_DATA"] == str(tmp_path / "scratch-data")
    assert {"TORCH_EXTENSIONS_DIR", "DLTUTOR_CACHE", "DLTUTOR_COURSE"} <= set(spec["env"])
    assert (Path(spec["env"]["DLTUTOR_COURSE"]) / "labs" / "02_ddp" / "train.py").is_file()
    assert cli.main(["kernel", "uninstall", "--name", "dltutor-test"]) == 0
    assert not (tmp_path / "user/kernels/dltutor-test").exists()
    assert cli.main(["kernel", "uninstall", "--name", "dltutor-test"]) == 2   # one clear line
    assert cli.main(["kernel", "install", "--name", "dltutor-test", "--scope", "sys-prefix"]) == 0
    assert (Path(sys.prefix) / "share/jupyter/kernels/dltutor-test/kernel.json").is_file()
    assert cli.main(["kernel", "uninstall", "--name", "dltutor-test"]) == 0


@pytest.mark.parametrize("module", ["deepspeed", "horovod", "matplotlib"])
def test_import_dltutor_is_light(module):
    code = f"import sys, dltutor, dltutor.core.env; print({module!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", f"`import dltutor` imported {module}"
