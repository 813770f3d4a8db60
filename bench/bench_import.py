"""Import cost of dltutor beyond `import torch`, in fresh interpreters (median of several).

    .venv/bin/python bench/bench_import.py            # 7 runs each
    .venv/bin/python bench/bench_import.py --runs 11

Each run is a new python process that imports torch, then times `import dltutor` (the package is
lazy) and, separately, the modules notebook 01 uses (`from dltutor.single import models, plots, train`
and `from dltutor.data import cifar10, loaders`). Goal: `import dltutor` adds <= 0.05 s.
"""
import argparse
import json
import statistics
import subprocess
import sys

PROBE = """
import json, time
t0 = time.perf_counter(); import torch; t1 = time.perf_counter()
import dltutor; t2 = time.perf_counter()
from dltutor.data import cifar10, loaders; from dltutor.single import models, plots, train
t3 = time.perf_counter()
print(json.dumps({"torch": t1 - t0, "dltutor": t2 - t1, "modules": t3 - t2}))
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--runs", type=int, default=7)
    a = p.parse_args()
    rows = []
    for _ in range(a.runs):
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"median of {a.runs} fresh interpreters:")
    print(f"  import torch                                  {med['torch']:.3f} s")
    print(f"  import dltutor (after torch)                  {med['dltutor']:.4f} s   (goal <= 0.05 s)")
    print(f"  notebook 01's modules (data, single)          {med['modules']:.3f} s")
    print(f"ratio (import dltutor) / (import torch) = {med['dltutor'] / med['torch']:.4f}")


if __name__ == "__main__":
    main()
