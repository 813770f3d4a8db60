"""The documented srun and sbatch forms (a lab's "Launch forms" block, the README) run on the
tests' Slurm (the `slurm_cluster` fixture), exactly as test_launch_forms.py runs every other form.

A file of their own so that the scheduler keeps them with the other users of the one local Slurm
(tests/conftest.py: worker_group) while the other forms run on whichever worker is free.
"""
import pytest

from test_launch_forms import commands_of, course_copy, run_form  # noqa: F401 (a fixture)


@pytest.mark.slow
@pytest.mark.parametrize("forms", commands_of(slurm=True), ids=lambda forms: " = ".join(map(str, forms)))
def test_slurm_form_runs_here(forms, slurm_cluster, course_copy, tmp_path):  # noqa: F811
    run_form(forms, course_copy, tmp_path)
