#!/usr/bin/env python3
"""Patch an extracted Horovod 0.28.1 source tree so it builds against a recent PyTorch.

Usage:  python scripts/patch_horovod.py SRC_DIR

Each edit is found by pattern; if a pattern is missing (a different Horovod release, or a tree that
was already built) the script stops with an error naming the file and the edit, so nothing is
half-patched silently. An edit whose marker is already present is reported and left alone.

The edits, and why:
  1. horovod/torch/CMakeLists.txt pins C++14 for the PyTorch binding, but the headers of
     torch 2.14 stop with "#error C++20 or later compatible compiler is required" -> use C++20
     (C++17 is not enough: ATen.h and torch/all.h test for C++20).
  2. cmake/Modules/FindPytorch.cmake calls a CUDA build of torch "CUDA" as soon as torch finds a
     CUDA_HOME (nvcc on PATH is enough). The torch binding then turns on Horovod's GPU code
     (add_cuda) and links cudart although no GPU operation was asked for, and fails when the
     toolkit is not where torch guessed. We define DLTUTOR_GPU_BUILD (top CMakeLists.txt) from
     the variables that request GPU operations (HOROVOD_GPU_OPERATIONS, HOROVOD_GPU_ALLREDUCE, ...,
     HOROVOD_GPU) and use the plain C++ extension unless it is set: a Gloo/CPU build that is the
     same on every machine, with or without a CUDA toolkit installed.
  3. The top-level CMakeLists.txt probes nvcc and the CUDA toolkit and enables the CUDA language
     whenever it finds one; for a CPU build that costs time and can fail with a toolkit newer than
     the CMake in use. Same rule: only when DLTUTOR_GPU_BUILD.
  4. The top-level CMakeLists.txt pins C++14 for the rest (Gloo, Horovod's common code). Mixed
     with the C++20 binding the link fails: gloo's `Store::kDefaultTimeout` is an out-of-line
     constexpr member in C++14 (a strong symbol in libgloo.a) but an inline one in C++17+ (a
     COMDAT symbol in http_store.cc.o) -> "multiple definition". C++17 for all fixes it; C++17,
     not 20, because that is what Horovod itself uses for Gloo next to TensorFlow.
  5. horovod/torch/CMakeLists.txt asks distutils for the Python include dir; distutils is gone in
     Python 3.12 -> ask sysconfig (same answer on 3.11).
  6. horovod/common/group_table.h uses std::string without including <string>; GCC 12's headers
     brought it in by the way, GCC 13's do not ("'string' in namespace 'std' does not name a
     type", seen on a GPU node with GCC 13.3) -> include it.
  7. horovod/common/common.h throws std::logic_error without including <stdexcept>; with GCC 13's
     headers every file that includes common.h stops ("'logic_error' is not a member of 'std'",
     found by compiling the GPU build's sources against libstdc++ 13.3's headers) -> include it.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

MARK = "dltutor-patch"

# Names of the build-environment variables that ask Horovod for GPU operations.
GPU_VARS = ["HOROVOD_GPU", "HOROVOD_GPU_OPERATIONS", "HOROVOD_GPU_ALLREDUCE",
            "HOROVOD_GPU_ALLGATHER", "HOROVOD_GPU_BROADCAST", "HOROVOD_GPU_ALLTOALL",
            "HOROVOD_GPU_REDUCESCATTER"]
GPU_FLAG = "DLTUTOR_GPU_BUILD"
GPU_BLOCK = (f"\n# {MARK}: build GPU code only when GPU operations are requested\n"
             f"set({GPU_FLAG} FALSE)\n"
             f'if(NOT "{"".join("$ENV{%s}" % v for v in GPU_VARS)}" STREQUAL "")\n'
             f"    set({GPU_FLAG} TRUE)\nendif()\n"
             f'message(STATUS "{MARK}: GPU build = ${{{GPU_FLAG}}}")')

# (file, what, regex, replacement, text that shows the edit is in); each regex must match once.
EDITS = [
    ("CMakeLists.txt", "define DLTUTOR_GPU_BUILD from the HOROVOD_GPU* variables",
     r"^(project\(horovod CXX\)[ \t]*)$", r"\1" + GPU_BLOCK.replace("\\", "\\\\"),
     f"set({GPU_FLAG} FALSE)"),
    ("CMakeLists.txt", "probe nvcc / the CUDA toolkit only for a GPU build",
     r"^check_language\(CUDA\)[ \t]*\nif\(NOT CMAKE_CUDA_COMPILER\)[ \t]*$",
     f"if({GPU_FLAG})  # {MARK}\n    check_language(CUDA)\nendif()\n"
     f"if({GPU_FLAG} AND NOT CMAKE_CUDA_COMPILER)",
     f"if({GPU_FLAG} AND NOT CMAKE_CUDA_COMPILER)"),
    ("CMakeLists.txt", "everything else (Gloo, common code): C++14 -> C++17",
     r"^set\(CMAKE_CXX_STANDARD 14\)[ \t]*$",
     f"set(CMAKE_CXX_STANDARD 17)  # {MARK}: same ODR rules as the C++20 torch binding",
     f"set(CMAKE_CXX_STANDARD 17)  # {MARK}"),
    ("cmake/Modules/FindPytorch.cmake", "CUDA torch extension only for a GPU build",
     r'^(string\(TOUPPER "\$\{Pytorch_CUDA\}" Pytorch_CUDA\)[ \t]*)$',
     r"\1" + f"\n# {MARK}: a CUDA build of torch does not make Horovod a GPU build\n"
     f"if(NOT {GPU_FLAG})\n    set(Pytorch_CUDA FALSE)\nendif()",
     f"if(NOT {GPU_FLAG})"),
    ("horovod/torch/CMakeLists.txt", "PyTorch binding: C++14 -> C++20",
     r"^([ \t]*)set\(CMAKE_CXX_STANDARD 14\)[ \t]*$",
     r"\1set(CMAKE_CXX_STANDARD 20)  # " + MARK + ": torch 2.x headers need C++20",
     "set(CMAKE_CXX_STANDARD 20)  # " + MARK),
    ("horovod/torch/CMakeLists.txt", "Python include dir via sysconfig, not distutils",
     r'"from distutils\.sysconfig import get_python_inc; print\(get_python_inc\(\)\)"',
     "\"import sysconfig; print(sysconfig.get_paths()['include'])\"",
     "import sysconfig; print(sysconfig.get_paths()['include'])"),
    ("horovod/common/group_table.h", "include <string> (GCC 13 no longer brings it in)",
     r"^(#include <mutex>[ \t]*)$", r"\1\n#include <string>  // " + MARK + ": GCC 13",
     "#include <string>  // " + MARK),
    ("horovod/common/common.h", "include <stdexcept> (GCC 13 no longer brings it in)",
     r"^(#include <memory>[ \t]*)$", r"\1\n#include <stdexcept>  // " + MARK + ": GCC 13",
     "#include <stdexcept>  // " + MARK),
]


def apply(src: Path) -> int:
    """Apply every edit under `src`; return the number of edits made."""
    made = 0
    for rel, what, pattern, repl, done in EDITS:
        path = src / rel
        if not path.is_file():
            raise SystemExit(f"patch_horovod: {path} not found -- is {src} a Horovod 0.28.1 tree?")
        text = path.read_text()
        if done in text:
            print(f"  = {rel}: {what} (already patched)")
            continue
        hits = re.findall(pattern, text, flags=re.M)
        if len(hits) != 1:
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
