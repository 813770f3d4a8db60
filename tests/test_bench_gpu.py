"""The GPU measurements of bench/ (the record in docs/verified/ quotes them): on this GPU-less
machine each says what it is instead of printing a number it did not measure."""
from __future__ import annotations

import json
import subprocess
import sys

from dltutor.core.course import course_root

BENCH = course_root().parent / "bench"


def run(script, *args, timeout=240):
    return subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=str(BENCH.parent))


def test_zero_gpu_memory_refuses_without_a_gpu_in_one_line():
    res = run("bench_zero_gpu.py", "--part", "stages")
    assert res.returncode == 1
    assert res.stdout.strip() == ("bench_zero_gpu: no GPU visible; this measures GPU memory "
                                  "(run it on a GPU node)")


def test_matmul_roof_on_a_cpu_is_labelled_and_uses_the_labs_shapes(tmp_path):
    out = tmp_path / "m.json"
    res = run("bench_matmul_roof.py", "--reps", "1", "--json", str(out))
    assert res.returncode == 0, res.stderr
    m = json.loads(out.read_text())
    assert m["device"] == "CPU (no GPU visible)" and m["rows"][0]["shape"].startswith("256^3 (CPU")
    shapes = {(r["M"], r["K"], r["N"]) for r in m["rows"][1:]}
    assert shapes == {(32, 64, 192), (32, 64, 64), (32, 64, 256), (32, 256, 64)}  # lab 04 --tiny
    assert all(r["tflops"] > 0 for r in m["rows"])


def test_horovod_comparison_needs_the_upstream_example(tmp_path):
    res = run("bench_hvd_upstream.py", "--upstream", str(tmp_path / "nowhere.py"))
    assert res.returncode == 2 and "no such file" in res.stderr
