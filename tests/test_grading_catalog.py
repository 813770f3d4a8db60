"""The catalog is the course's exercises: enough of them, most on real ranks, each one checked.

Each id must be the id of exactly one check in the package (the verdict it shows carries it, so the
instructor's report can list it), and its notebook must exist and name the check's module.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

from dltutor.grading import catalog

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "course" / "notebooks"


def test_ten_exercises_seven_on_real_ranks_in_every_notebook():
    ids = [e.id for e in catalog.EXERCISES]
    assert len(ids) == len(set(ids)) >= 10, ids
    assert sum(e.ranks >= 2 for e in catalog.EXERCISES) >= 7
    assert {e.notebook[:2] for e in catalog.EXERCISES} == {f"0{i}" for i in range(1, 10)} | {"10"}


def _sources() -> dict[Path, str]:
    return {p: p.read_text() for p in (ROOT / "dltutor").rglob("*.py")
            if p.parent.name != "grading"}


def test_every_exercise_has_one_check_module_that_its_notebook_imports():
    sources = _sources()
    for e in catalog.EXERCISES:
        owners = [p for p, text in sources.items() if re.search(rf"[\"']{re.escape(e.id)}[\"']", text)]
        assert len(owners) == 1, f"{e.id}: named by {owners or 'no module'} (want one check)"
        module = ".".join(owners[0].relative_to(ROOT).with_suffix("").parts)
        nb = nbformat.read(NOTEBOOKS / e.notebook, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        package, name = module.rsplit(".", 1)
        assert re.search(rf"from {re.escape(package)} import .*\b{name}\b|import {re.escape(module)}",
                         code), f"{e.notebook} does not import {module}, the check of {e.id}"


def test_unknown_id_is_refused_with_the_list():
    try:
        catalog.get("09-nothing")
    except KeyError as exc:
        assert "02-ddp" in str(exc)
    else:
        raise AssertionError("an unknown id was accepted")
