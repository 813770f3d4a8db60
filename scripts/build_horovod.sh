#!/usr/bin/env bash
# Build Horovod 0.28.1 for the torch of PYTHON, with PyTorch + Gloo (no MPI, no TF/MXNet), plus
# NCCL for GPU tensors on a GPU node (see DLTUTOR_HOROVOD_NCCL), and install it. The wheel is kept in the cache, so a second run (or a second venv with the same
# torch and Python) only installs it.
#
#   bash scripts/build_horovod.sh PYTHON            e.g. bash scripts/build_horovod.sh .venv/bin/python
#
# Environment:
#   DLTUTOR_CACHE            cache root (default ~/.cache/dltutor); wheels go to $DLTUTOR_CACHE/wheels
#   DLTUTOR_HOROVOD_NCCL     auto (default) -> NCCL build when nvcc is on PATH and torch (a CUDA
#                            build) sees a GPU, else the CPU/Gloo build; 1 -> NCCL build; 0 -> Gloo only
#   HOROVOD_GPU_OPERATIONS   set by hand wins over DLTUTOR_HOROVOD_NCCL: NCCL -> GPU build on a CUDA
#                            site (needs nvcc, NCCL; CUDA_HOME helps; HOROVOD_NCCL_HOME is taken from
#                            the nvidia-nccl wheel next to torch when it has nccl.h)
#                            Either GPU build keeps Gloo, so `horovodrun --gloo` works on the CPU too.
#   DLTUTOR_HOROVOD_REBUILD  1 -> ignore a cached wheel and build again
#   HOROVOD_BUILD_CUDA_CC_LIST  GPU build: compute capabilities to compile for, e.g. 80,90
#                            (default: those of the GPUs torch sees here; Horovod's own default
#                            is every one nvcc knows, slow)
#   MAKEFLAGS                default -j<cores>; Horovod's setup.py passes -j8 unless MAKEFLAGS is set
#
# Why a patch (scripts/patch_horovod.py): Horovod 0.28.1 pins C++14 but torch 2.14 headers need
# C++20 (and Gloo must then be C++17 too, or the link fails), and it turns a CPU build into a
# CUDA build as soon as torch is a CUDA build and nvcc is on PATH. The source is extracted fresh every time: a Horovod tree is only built once.
set -euo pipefail

HVD_VERSION=0.28.1
PY=${1:?usage: build_horovod.sh PYTHON   (e.g. .venv/bin/python)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# the cache of that Python's course install (DLTUTOR_CACHE, or the one its set-up recorded)
CACHE=${DLTUTOR_CACHE:-$("$PY" -c "from dltutor.core.env import cache_dir; print(cache_dir())" 2>/dev/null \
  || echo "${XDG_CACHE_HOME:-$HOME/.cache}/dltutor")}
WHEELS=$CACHE/wheels
say() { printf '[build_horovod] %s\n' "$*"; }
die() { printf '[build_horovod] ERROR: %s\n' "$*" >&2; exit 1; }

case "${DLTUTOR_HOROVOD_NCCL:-auto}" in    # checked first: a wrong switch costs no time
    1|yes|true) command -v nvcc >/dev/null \
        || die "DLTUTOR_HOROVOD_NCCL=1 (NCCL build) needs nvcc on PATH (e.g. module load cuda)" ;;
    0|no|false|auto) ;;
    *) die "DLTUTOR_HOROVOD_NCCL must be 1, 0 or auto, not '${DLTUTOR_HOROVOD_NCCL}'" ;;
esac
[ -x "$PY" ] || command -v "$PY" >/dev/null || die "no python at '$PY'"
PY=$(command -v "$PY" 2>/dev/null || echo "$PY")
# One probe (torch imported once: seconds on 2 cores): torch's version, the Python tag, whether torch
# sees a GPU, and the Horovod version that imports with this torch ('-': none). A Horovod that cannot
# load (or kills the probe) makes the first probe fail; the second leaves Horovod out.
probe() {
    "$PY" - "$1" 2>/dev/null <<'PROBE'
import sys
import torch
gpu = int(bool(torch.version.cuda) and torch.cuda.device_count() > 0)
ccs = ",".join(sorted({"%d%d" % torch.cuda.get_device_capability(i)
                       for i in range(torch.cuda.device_count())})) if gpu else "-"
hvd = "-"
if sys.argv[1] == "horovod":
    import horovod.torch  # noqa: F401  (raises, or kills this probe, when the build does not fit)
    from importlib.metadata import version
    hvd = version("horovod")
print(torch.__version__, f"cp{sys.version_info[0]}{sys.version_info[1]}", gpu, hvd, ccs)
PROBE
}
FOUND=$(probe horovod || probe none) || die "$PY cannot import torch; install torch first"
# What decides binary compatibility: torch version, Python tag, CPU vs GPU ops.
read -r TORCH_VERSION PYTAG TORCH_SEES_GPU HVD_IMPORTS GPU_CCS <<< "$FOUND"
# NCCL or not: an explicit HOROVOD_GPU_OPERATIONS wins, else DLTUTOR_HOROVOD_NCCL (1 / 0 / auto).
if [ -z "${HOROVOD_GPU_OPERATIONS:-}" ]; then
    case "${DLTUTOR_HOROVOD_NCCL:-auto}" in
        1|yes|true) export HOROVOD_GPU_OPERATIONS=NCCL; say "DLTUTOR_HOROVOD_NCCL=1: NCCL build" ;;
        0|no|false) say "DLTUTOR_HOROVOD_NCCL=0: CPU/Gloo build" ;;
        auto)
            if command -v nvcc >/dev/null && [ "$TORCH_SEES_GPU" = 1 ]; then
                export HOROVOD_GPU_OPERATIONS=NCCL
                say "auto: nvcc and a GPU found: NCCL build (DLTUTOR_HOROVOD_NCCL=0 for Gloo only)"
            else
                say "auto: no nvcc or no GPU visible to torch: CPU/Gloo build (DLTUTOR_HOROVOD_NCCL=1 forces NCCL)"
            fi ;;
    esac
fi
NCCL_WHEEL=
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ] && [ -z "${HOROVOD_NCCL_HOME:-}" ]; then
    # pip's torch brings NCCL as the nvidia-nccl-cu* wheel: use its headers and library if complete
    NCCL_WHEEL=$("$PY" -c 'import importlib.util as u, os
s = u.find_spec("nvidia.nccl")
d = list(s.submodule_search_locations)[0] if s else ""
print(d if d and os.path.isfile(os.path.join(d, "include", "nccl.h")) else "")' 2>/dev/null || true)
fi
OPS=cpu
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then
    OPS=$(printf '%s' "$HOROVOD_GPU_OPERATIONS" | tr 'A-Z' 'a-z')
fi
if [ "$OPS" != cpu ] && ! command -v nvcc >/dev/null; then
    die "HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS (NCCL build) needs nvcc on PATH (e.g. module load cuda)"
fi
# PEP 440 local version: letters, digits and dots only, e.g. 0.28.1+torch2.14.1.cu130.cpu
LOCAL=$(printf 'torch%s.%s' "$TORCH_VERSION" "$OPS" | tr -c 'A-Za-z0-9.\n' '.')
say "python $PY ($PYTAG), torch $TORCH_VERSION, ops=$OPS -> horovod $HVD_VERSION+$LOCAL"

install_wheel() {
    say "installing $1"
    "$PY" -m pip install --no-input --disable-pip-version-check --quiet "$1"
    "$PY" - <<'EOF'
import horovod.torch as hvd
print("[build_horovod] horovod", __import__("horovod").__version__,
      "| gloo:", hvd.gloo_built(), "| mpi:", hvd.mpi_built(), "| nccl:", hvd.nccl_built())
EOF
}

if [ "$HVD_IMPORTS" = "$HVD_VERSION+$LOCAL" ] && [ "${DLTUTOR_HOROVOD_REBUILD:-0}" != 1 ]; then
    say "horovod $HVD_IMPORTS already installed (it imports with this torch), nothing to do"
    exit 0
fi

mkdir -p "$WHEELS"
shopt -s nullglob
cached=("$WHEELS"/horovod-"$HVD_VERSION"+"$LOCAL"-"$PYTAG"-"$PYTAG"-*.whl)
shopt -u nullglob
if [ ${#cached[@]} -gt 0 ] && [ "${DLTUTOR_HOROVOD_REBUILD:-0}" != 1 ]; then
    say "cached wheel found, no build needed"
    install_wheel "${cached[0]}"
    exit 0
fi

# ---- build prerequisites ---------------------------------------------------------------------
command -v c++ >/dev/null || die "no C++ compiler (Debian: apt-get install -y build-essential)"
CXXMAJOR=$(c++ -dumpversion | cut -d. -f1)
[ "$CXXMAJOR" -ge 10 ] 2>/dev/null || say "warning: c++ version $CXXMAJOR; torch headers need C++20 (gcc >= 10)"
if ! command -v cmake >/dev/null; then
    say "cmake not found: installing it from PyPI into the venv"
    "$PY" -m pip install --no-input --quiet 'cmake>=3.18,<4'
    export PATH="$(dirname "$PY"):$PATH"
fi
say "cmake: $(cmake --version | head -1)"
# CMake >= 4 refuses the cmake_minimum_required(VERSION 2.x/3.x < 3.5) of Horovod's third-party
# trees (gloo, ...) ("Compatibility with CMake < 3.5 has been removed"); this variable lets it
# configure them with 3.5 policies. CMake 3 ignores it.
export CMAKE_POLICY_VERSION_MINIMUM=${CMAKE_POLICY_VERSION_MINIMUM:-3.5}
# setup.py imports packaging and horovod.runner; --no-build-isolation uses the venv's setuptools.
"$PY" -m pip install --no-input --disable-pip-version-check --quiet \
    setuptools wheel packaging cloudpickle psutil pyyaml 'cffi>=1.4.0'

# ---- fresh source tree -----------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dltutor-horovod.XXXXXX")
# keep the tree (build logs) when the build fails, remove it when it worked
trap 'rc=$?; if [ $rc -eq 0 ]; then rm -rf "$WORK"; else echo "[build_horovod] failed (rc=$rc); tree kept in $WORK" >&2; fi' EXIT
say "work dir $WORK"
SDIST=$CACHE/sdist/horovod-$HVD_VERSION.tar.gz
if [ ! -s "$SDIST" ]; then
    say "downloading the horovod $HVD_VERSION sdist with pip"
    mkdir -p "$CACHE/sdist"
    "$PY" -m pip download --no-input --disable-pip-version-check --quiet --no-deps \
        --no-build-isolation --no-binary :all: -d "$WORK/sdist" "horovod==$HVD_VERSION"
    mv "$WORK/sdist/horovod-$HVD_VERSION.tar.gz" "$SDIST"
fi
say "extracting $SDIST"
tar -xzf "$SDIST" -C "$WORK"
SRC=$WORK/horovod-$HVD_VERSION
"$PY" "$HERE/patch_horovod.py" "$SRC"
if [ -n "$NCCL_WHEEL" ]; then
    # The wheel ships lib/libnccl.so.2 but no libnccl.so (what CMake's find_library looks for):
    # a small NCCL home in the work dir links both. Shared linking: torch loads that same
    # libnccl.so.2 before horovod.torch is imported.
    mkdir -p "$WORK/nccl/lib"
    ln -s "$NCCL_WHEEL/include" "$WORK/nccl/include"
    ln -s "$NCCL_WHEEL/lib/libnccl.so.2" "$WORK/nccl/lib/libnccl.so"
    export HOROVOD_NCCL_HOME=$WORK/nccl HOROVOD_NCCL_LINK=shared
    say "HOROVOD_NCCL_HOME=$HOROVOD_NCCL_HOME (torch's nvidia-nccl wheel, $NCCL_WHEEL)"
fi
if [ "$OPS" != cpu ] && [ -z "${HOROVOD_BUILD_CUDA_CC_LIST:-}" ] && [ "$GPU_CCS" != - ]; then
    # Horovod's default is every architecture nvcc knows (a dozen on CUDA 13, each compiled twice)
    export HOROVOD_BUILD_CUDA_CC_LIST=$GPU_CCS
    say "HOROVOD_BUILD_CUDA_CC_LIST=$GPU_CCS (the GPUs of this node; set it to build for others)"
fi

# ---- build ------------------------------------------------------------------------------------
# (only now: pip download checks that the sdist's metadata says plain 0.28.1)
export HOROVOD_LOCAL_VERSION=$LOCAL
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
NCORES=$("$PY" -c 'import os; print(len(os.sched_getaffinity(0)))')
export MAKEFLAGS=${MAKEFLAGS:--j$NCORES}
if [ "$OPS" != cpu ]; then
    say "GPU build requested: HOROVOD_GPU_OPERATIONS=$HOROVOD_GPU_OPERATIONS CUDA_HOME=${CUDA_HOME:-<unset>} HOROVOD_NCCL_HOME=${HOROVOD_NCCL_HOME:-<unset>}"
    [ -n "${CUDA_HOME:-}" ] || say "hint: export CUDA_HOME=<toolkit root> if CMake cannot find cudart"
    [ -n "${HOROVOD_NCCL_HOME:-}" ] || say "hint: export HOROVOD_NCCL_HOME=<NCCL root> if CMake cannot find nccl.h"
fi
say "building wheel (MAKEFLAGS=$MAKEFLAGS); this takes several minutes on a few cores"
start=$(date +%s)
"$PY" -m pip wheel --no-input --disable-pip-version-check --no-build-isolation --no-deps \
    -w "$WORK/dist" "$SRC"
secs=$(( $(date +%s) - start ))
say "build took ${secs}s ($((secs / 60)) min $((secs % 60)) s)"

built=("$WORK"/dist/horovod-*.whl)
[ -f "${built[0]}" ] || die "pip wheel produced no horovod wheel"
cp "${built[0]}" "$WHEELS/"
whl=$WHEELS/$(basename "${built[0]}")
say "cached $whl"
install_wheel "$whl"
