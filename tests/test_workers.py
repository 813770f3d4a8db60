"""`make test` on two workers: what must run in one process does (tests/conftest.py's scheduler)."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import SLURM_GROUP, scope_of

ROOT = Path(__file__).resolve().parents[1]


def test_every_user_of_the_local_slurm_is_one_unit():
    users = [p for p in sorted((ROOT / "tests").glob("test_*.py"))
             if re.search(r"\bslurm_cluster\b", p.read_text())]
    assert {p.name for p in users} >= {"test_slurm.py", "test_hub.py", "test_launch_forms_slurm.py",
                                       "test_multinode_labs.py", "test_multinode_engines.py",
                                       "test_multinode_faults.py", "test_cluster_nodes.py"}
    for p in users:
        assert scope_of(f"tests/{p.name}::test_x[a::b]") == SLURM_GROUP, p.name
    # notebook 02's section 5 submits a job to the cluster that the test files started
    assert scope_of("course/notebooks/02_ddp_multi_gpu.ipynb::Cell 35") == SLURM_GROUP


def test_every_other_file_is_a_unit_of_its_own():
    assert scope_of("tests/test_tables.py::test_a") == "tests/test_tables.py"
    # the forms no Slurm starts run on whichever worker is free, apart from the Slurm ones
    assert scope_of("tests/test_launch_forms.py::test_form_runs_here[x]") == "tests/test_launch_forms.py"
    assert scope_of("tests/test_tables.py::test_b[x]") == "tests/test_tables.py"
    nb = "course/notebooks/05_ring_allreduce_visualizer.ipynb"
    assert scope_of(f"{nb}::Cell 0") == scope_of(f"{nb}::Cell 27") == nb


def test_the_makefile_runs_the_suite_on_workers_by_file():
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "-n $(TEST_WORKERS) --dist loadfile" in recipe


def test_the_longest_units_are_handed_out_first_in_the_listed_order():
    from types import SimpleNamespace

    from conftest import LONGEST_FIRST, pytest_collection_modifyitems, pytest_xdist_make_scheduler
    assert LONGEST_FIRST[0] == SLURM_GROUP
    assert all((ROOT / unit).is_file() for unit in LONGEST_FIRST[1:]), LONGEST_FIRST
    ids = ["tests/test_tables.py::test_a", "tests/test_browser.py::test_b",
           "course/notebooks/03_horovod_synthetic_resnet50.ipynb::Cell 0", "tests/test_slurm.py::t",
           "tests/test_tables.py::test_c", "course/notebooks/03_horovod_synthetic_resnet50.ipynb::Cell 1"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == [ids[3], ids[2], ids[5], ids[1], ids[0], ids[4]]
    # and xdist hands the units out in that order, not sorted by their number of tests
    option = SimpleNamespace(loadscopereorder=True, dist="loadfile", tx=["popen"] * 2, numprocesses=0)
    config = SimpleNamespace(option=option, getvalue=lambda name: getattr(option, name))
    scheduler = pytest_xdist_make_scheduler(config, log=None)
    assert option.loadscopereorder is False and scheduler._split_scope(ids[3]) == SLURM_GROUP
