#!/usr/bin/env bash
# One set-up for the course: .venv with every engine, the Jupyter kernel, pre-built ops.
#
#   bash scripts/setup.sh          # what `make setup` / `make lab` run
#   bash scripts/setup.sh --test   # also the system packages the test suite uses (Slurm, chromium)
#
# Idempotent: a second run checks stamps and reuses the cached Horovod wheel and compiled ops under
# ${DLTUTOR_CACHE:-~/.cache/dltutor}. Set PYTHON to choose the interpreter (default python3.11/python3).
# On a portal, keep both off $HOME (quotas):  VENV=$SCRATCH/envs/dltutor-venv DLTUTOR_CACHE=$SCRATCH/dltutor-cache
# The venv records its cache (etc/dltutor/cache), so its kernel and labs find it without the export.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VENV:-$ROOT/.venv}
# the cache: DLTUTOR_CACHE, else the one this venv was set up with, else ~/.cache/dltutor
recorded=$VENV/etc/dltutor/cache
CACHE=${DLTUTOR_CACHE:-$(cat "$recorded" 2>/dev/null || echo "${XDG_CACHE_HOME:-$HOME/.cache}/dltutor")}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
export DLTUTOR_CACHE=$CACHE
WITH_TEST=0
[ "${1:-}" = "--test" ] && WITH_TEST=1
start=$(date +%s)

step() { printf '\n==> %s\n' "$*"; }

# ---- 1. system packages (Debian): only what is missing, only where we may install ----------------
apt_pkgs=(libaio-dev)                      # DeepSpeed NVMe offload (ZeRO-Infinity)
apt_pkgs+=(dataset-fashion-mnist)          # real data offline: Fashion-MNIST, the stand-in for CIFAR-10
if [ "$WITH_TEST" = 1 ]; then
  apt_pkgs+=(slurm-wlm munge chromium)      # a real Slurm; a browser for the widget test
  apt_pkgs+=(openssh-server pdsh)           # ssh between the test cluster's nodes (Horovod, DeepSpeed)
fi
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
  if command -v apt-get >/dev/null && { [ -z "$SUDO" ] || sudo -n true 2>/dev/null; }; then
    step "installing Debian packages: ${missing[*]}"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "NOTE: cannot install ${missing[*]} here (no root/apt-get)."
    echo "      NVMe offload needs libaio-dev; ask your centre or use CPU offload instead."
    echo "      Without dataset-fashion-mnist (or CIFAR-10 staged) notebooks train on SYNTHETIC data."
    [ "$WITH_TEST" = 1 ] && { echo "ERROR: the test suite needs ${missing[*]}"; exit 1; }
  fi
fi

# ---- 2. the virtual environment -----------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
  step "creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
VPY=$VENV/bin/python
# the environment remembers its cache: its kernel, labs and ranks use it without DLTUTOR_CACHE set
mkdir -p "$(dirname "$recorded")" && echo "$CACHE" > "$recorded"
stamp=$VENV/.dltutor-pip-stamp
want=$( (cat pyproject.toml constraints.txt scripts/setup.sh; echo "$ROOT") | sha256sum | cut -c1-16)  # the checkout too: `pip install -e` points at it
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  step "installing python packages (torch==2.14.1, deepspeed, jupyterlab, ...)"
  "$VPY" -m pip install -q --upgrade pip wheel setuptools 2>&1 | grep -v "is ignored" || true
  "$VPY" -m pip install -q -c constraints.txt -e ".[test]" 2>&1 | grep -v "is ignored" || true
  "$VPY" -c "import torch, deepspeed, jupyterlab, ipywidgets, nbval, h5py, nbgrader" 2>/dev/null \
    || { echo "ERROR: python packages did not install; rerun with pip's output: $VPY -m pip install -c constraints.txt -e '.[test]'"; exit 1; }
  echo "$want" > "$stamp"
else
  echo "python packages: up to date ($VENV)"
fi

# ---- 3. engines: Horovod (built from source, wheel cached) and DeepSpeed ops (pre-built) --------
step "Horovod 0.28.1 (PyTorch + Gloo; + NCCL on a GPU node, see DLTUTOR_HOROVOD_NCCL)"
bash scripts/build_horovod.sh "$VPY"
step "DeepSpeed ops (cpu_adam, aio) pre-built"
"$VPY" scripts/warm_deepspeed.py --if-changed

# ---- 3b. tests only: a JupyterHub portal with its own Python (tests/test_hub.py) ------------------
if [ "$WITH_TEST" = 1 ]; then
  HUB=$CACHE/hub
  hub_want=$(cat tests/hub/requirements.txt tests/hub/proxy-version | sha256sum | cut -c1-16)
  if [ "$(cat "$HUB/.stamp" 2>/dev/null)" != "$hub_want" ]; then
    step "JupyterHub + batchspawner + nbgitpuller (own venv) and configurable-http-proxy (npm) for the hub test"
    command -v npm >/dev/null || { echo "ERROR: the hub test needs npm (Node.js) for configurable-http-proxy"; exit 1; }
    rm -rf "$HUB" && mkdir -p "$HUB"
    "${PYTHON:-$(command -v python3.11 || command -v python3)}" -m venv "$HUB/venv"
    "$HUB/venv/bin/pip" install -q -c constraints.txt -r tests/hub/requirements.txt 2>&1 | grep -v "is ignored" || true
    npm install -s --no-fund --no-audit --prefix "$HUB/npm" "configurable-http-proxy@$(cat tests/hub/proxy-version)" >/dev/null
    "$HUB/venv/bin/python" -c "import jupyterhub, batchspawner, nbgitpuller" && [ -x "$HUB/npm/node_modules/.bin/configurable-http-proxy" ] \
      || { echo "ERROR: the hub for the tests did not install (see above)"; exit 1; }
    echo "$hub_want" > "$HUB/.stamp"
  else
    echo "hub for the tests: up to date ($HUB)"
  fi
fi

# ---- 4. the Jupyter kernel ------------------------------------------------------------------------
"$VPY" -m dltutor kernel install --scope sys-prefix --display-name "Python (dltutor)" >/dev/null 2>&1 \
  && echo "Jupyter kernel 'dltutor' registered in $VENV"

echo
echo "setup done in $(( $(date +%s) - start )) s  (python: $VPY, cache: $CACHE)"
