"""A rank that tore its process group down cleanly leaves with os._exit and its own exit code
(dltutor.core.rank_exit): gloo's C++ teardown at interpreter exit can no longer abort it."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dltutor.core.dist import free_port

RANK = """
import atexit, sys
from dltutor.core import dist
atexit.register(lambda: print("LATE EXIT HANDLER RAN", flush=True))   # the interpreter's teardown
with dist.session() as ctx:
    dist.rank_print("in the group:", ctx.backend, ctx.world_size)
print("after the session", flush=True)
{end}
"""


def _run(end: str, tmp_path, script: str = RANK):
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    return subprocess.run([sys.executable, "-c", script.format(end=end)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("end, code", [("", 0), ("sys.exit(0)", 0), ("sys.exit(3)", 3),
                                       ("sys.exit('a message')", 1),
                                       ("raise RuntimeError('after the session')", 1)])
def test_a_clean_rank_skips_the_interpreters_teardown_and_keeps_its_exit_code(end, code, tmp_path):
    out = _run(end, tmp_path)
    assert out.returncode == code, out.stdout + out.stderr
    assert "in the group: gloo 1" in out.stdout and "after the session" in out.stdout
    assert "LATE EXIT HANDLER RAN" not in out.stdout, "the rank went through the full teardown"
    if code == 1 and "RuntimeError" in end:
        assert "RuntimeError: after the session" in out.stderr        # the traceback still shows


def test_a_rank_whose_block_failed_exits_the_ordinary_way(tmp_path):
    failing = RANK.replace('    dist.rank_print("in the group:", ctx.backend, ctx.world_size)',
                           '    raise ValueError("inside the group")')
    out = _run("", tmp_path, failing)
    assert out.returncode == 1 and "ValueError: inside the group" in out.stderr
    assert "LATE EXIT HANDLER RAN" in out.stdout          # not armed: normal interpreter exit
