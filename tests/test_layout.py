"""The package layout holds: one folder per topic, imports only downward, no circles, one name each.

What the rules are, and why, is in docs/LAYOUT.md. Every import of dltutor in every module counts,
including the ones inside functions (a lazy import is still a dependency).
"""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dltutor"

# folder -> the folders it may import from (besides itself)
ALLOWED = {
    "core": set(),
    "data": {"core"},
    "launch": {"core"},
    "grading": {"core", "launch"},
    "single": {"core", "data", "grading"},
    "ddp": {"core", "data", "launch", "grading", "single"},
    "horovod": {"core", "data", "launch", "grading", "single", "ddp"},
    "zero": {"core", "data", "launch", "grading", "single", "ddp"},
    "allreduce": {"core", "data", "launch", "grading", "single", "ddp"},
    "model_parallel": {"core", "data", "launch", "grading", "single", "ddp", "allreduce"},
    "io": {"core", "data", "launch", "grading", "single", "ddp"},
    "debug": {"core", "data", "launch", "grading", "ddp"},
    "checkpoint": {"core", "data", "launch", "grading", "ddp"},
    "context_parallel": {"core", "data", "launch", "grading", "ddp", "allreduce"},
    "experts": {"core", "data", "launch", "grading", "ddp", "allreduce"},
}
TOP = {"__init__", "__main__", "cli", "doctor", "kernel", "preflight"}   # the package's face: any folder


def modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in PKG.rglob("*.py")}


def dltutor_imports(path: Path) -> set[str]:
    """Every dltutor module `path` imports (`from dltutor.x import y` counts y if it is a module)."""
    mods = modules()
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("dltutor")}
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path.relative_to(ROOT)}: relative import; write dltutor.<...>")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dltutor"):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in mods or f"{sub}.__init__" in mods else node.module)
    return {m for m in found if m != "dltutor"}


def folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ALLOWED) else parts[-1]


def test_every_folder_imports_only_from_below():
    wrong = []
    for name, path in modules().items():
        here = folder(name)
        if here in TOP:
            continue
        for target in dltutor_imports(path):
            there = folder(target)
            if there in TOP or (there != here and there not in ALLOWED[here]):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "imports against the layout (docs/LAYOUT.md):\n" + "\n".join(wrong)


def test_no_import_circles():
    graph = {name: {t for t in dltutor_imports(p) if t in modules()} for name, p in modules().items()}
    state: dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join(trail[trail.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])


def test_folder_inits_hold_only_a_docstring_naming_their_notebook():
    for sub in ALLOWED:
        init = PKG / sub / "__init__.py"
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree)
        assert doc and len(tree.body) == 1, f"{sub}/__init__.py: a docstring and nothing else"
        for path in (PKG / sub).glob("*.py"):
            if path.name != "__init__.py":
                assert path.name in doc, f"{sub}/__init__.py does not describe {path.name}"


def test_no_module_reaches_into_the_checkout():
    for name, path in modules().items():
        text = path.read_text()
        if name == "dltutor.core.course":
            continue
        builds = re.search(r'/\s*"course"|"course"\s*/|Path\(\s*"course"|parents\[', text)
        assert not builds, (
            f"{name} builds a path into the checkout; use dltutor.core.course.lab(...)")


def test_pyproject_lists_every_subpackage_and_needs_311():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(meta["tool"]["setuptools"]["packages"])
    want = {"dltutor", "dltutor.course"} | {f"dltutor.{s}" for s in ALLOWED}
    on_disk = {"dltutor"} | {f"dltutor.{p.parent.name}" for p in PKG.glob("*/__init__.py")}
    assert listed == want and on_disk == want - {"dltutor.course"}, (listed, on_disk)
    assert meta["project"]["requires-python"].startswith(">=3.11")


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_stay_small(name):
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= 300, f"{name}: {lines} lines; split it by concept (aim <= 300)"


def test_course_root_setting_is_checked(tmp_path, monkeypatch):
    from dltutor.core import course
    monkeypatch.setenv(course.COURSE_ENV, str(tmp_path))
    with pytest.raises(course.CourseNotFound, match="has no labs/ folder"):
        course.course_root()
    (tmp_path / "labs" / "02_ddp").mkdir(parents=True)
    assert course.course_root() == tmp_path.resolve()
    with pytest.raises(course.CourseNotFound, match="no 02_ddp/train.py under"):
        course.lab("02_ddp/train.py")
    monkeypatch.delenv(course.COURSE_ENV)
    assert course.lab("02_ddp/train.py") == ROOT / "course" / "labs" / "02_ddp" / "train.py"
