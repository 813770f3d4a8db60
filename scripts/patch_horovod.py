#!/usr/bin/env python3
"""Patch an extracted Horovod 0.28.1 source tree so it builds against a recent PyTorch.

Usage:  python scripts/patch_horovod.py SRC_DIR

Each edit is found by pattern; if a pattern is missing (a different Horovod release, or a tree that
was already built) the script stops with an error naming the file and the edit, so nothing is
half-patched silently. An edit whose marker is already present is reported and left alone.

The edits, and why:
  1. horovod/torch/CMakeLists.txt pins C++14 for the PyTorch binding, but the headers of
     torch >= 2.10 stop with "#error C++20 or later compatible compiler is required" -> use C++20.
  2. cmake/Modules/FindPytorch.cmake calls a CUDA build of torch "CUDA" as soon as torch finds a
     CUDA_HOME (nvcc on PATH is enough). The torch binding then turns on Horovod's GPU code
     (add_cuda) and links cudart, although no GPU operation was asked for, and fails when the
     toolkit is not where torch guessed. We build the GPU path only when the user asks for GPU
     operations (HOROVOD_GPU_OPERATIONS / HOROVOD_GPU_ALLREDUCE / ... / HOROVOD_GPU), else the
     plain C++ extension, which is what a Gloo/CPU build needs on any machine.
  3. The top-level CMakeLists.txt enables the CUDA language whenever nvcc is found; for a CPU
     build that only costs time and can fail with a toolkit newer than CMake knows. Same rule.
  4. horovod/torch/CMakeLists.txt asks distutils for the Python include dir; distutils is gone in
     Python 3.12 -> ask sysconfig (same answer on 3.11).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

MARK = "dltutor-patch"

# One CMake condition, true when the user asked for GPU operations in the build environment.
GPU_ASKED = ('NOT "$ENV{HOROVOD_GPU}$ENV{HOROVOD_GPU_OPERATIONS}$ENV{HOROVOD_GPU_ALLREDUCE}'
             '$ENV{HOROVOD_GPU_ALLGATHER}$ENV{HOROVOD_GPU_BROADCAST}$ENV{HOROVOD_GPU_ALLTOALL}'
             '$ENV{HOROVOD_GPU_REDUCESCATTER}" STREQUAL ""')

# (file, what, regex, replacement, text that shows the edit is in); each regex must match once.
EDITS = [
    ("horovod/torch/CMakeLists.txt", "PyTorch binding: C++14 -> C++20",
     r"^(\s*)set\(CMAKE_CXX_STANDARD 14\)[ \t]*$",
     r"\1set(CMAKE_CXX_STANDARD 20)  # " + MARK + ": torch >= 2.10 headers need C++20",
     "set(CMAKE_CXX_STANDARD 20)  # " + MARK),
    ("cmake/Modules/FindPytorch.cmake", "CUDA extension only when GPU ops are requested",
     r'^(string\(TOUPPER "\$\{Pytorch_CUDA\}" Pytorch_CUDA\)[ \t]*)$',
     r"\1\n# " + MARK + ": a CUDA build of torch does not imply a GPU build of Horovod\n"
     "if(NOT (" + GPU_ASKED + "))\n"
     "    set(Pytorch_CUDA FALSE)\nendif()",
     MARK + ": a CUDA build of torch"),
    ("CMakeLists.txt", "enable the CUDA language only when GPU ops are requested",
     r"^check_language\(CUDA\)[ \t]*$",
     "# " + MARK + ": do not probe nvcc for a CPU-only build\n"
     "if(" + GPU_ASKED + ")\n    check_language(CUDA)\nendif()",
     MARK + ": do not probe nvcc"),
    ("horovod/torch/CMakeLists.txt", "Python include dir via sysconfig, not distutils",
     r'"from distutils\.sysconfig import get_python_inc; print\(get_python_inc\(\)\)"',
     "\"import sysconfig; print(sysconfig.get_paths()['include'])\"",
     "import sysconfig; print(sysconfig.get_paths()['include'])"),
]


def apply(src: Path) -> int:
    """Apply every edit under `src`; return the number of edits made."""
    made = 0
    for rel, what, pattern, repl, done in EDITS:
        path = src / rel
        if not path.is_file():
            raise SystemExit(f"patch_horovod: {path} not found -- is {src} a Horovod 0.28.1 tree?")
        text = path.read_text()
        hits = re.findall(pattern, text, flags=re.M)
        if len(hits) != 1:
            if done in text:
                print(f"  = {rel}: {what} (already patched)")
                continue
            raise SystemExit(f"patch_horovod: {rel}: pattern for '{what}' matched {len(hits)} times "
                             f"(expected 1): {pattern}")
        path.write_text(re.sub(pattern, repl, text, count=1, flags=re.M))
        print(f"  + {rel}: {what}")
        made += 1
    return made


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    src = Path(argv[1])
    print(f"patch_horovod: patching {src}")
    made = apply(src)
    print(f"patch_horovod: {made} edit(s) applied")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
