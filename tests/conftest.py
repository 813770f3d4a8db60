"""Test-wide settings: fast mode and offline data for every test and every notebook kernel.

Set here, at import, so that kernels started by nbval and processes started by tests inherit them.
"""
import os
import sys
from pathlib import Path

import pytest

os.environ["DLTUTOR_FAST"] = "1"
os.environ.setdefault("DLTUTOR_OFFLINE", "1")     # tests never fetch data from the web
os.environ.setdefault("PYTHONUNBUFFERED", "1")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def python() -> str:
    """The interpreter of the course environment (the one running the tests)."""
    return sys.executable
