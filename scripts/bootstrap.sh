#!/usr/bin/env bash
# Installs what Baton's build needs on Debian 12 / Ubuntu 24.04 when it is
# missing, and configures the build tree. Idempotent: a second run installs
# nothing and reuses the configured tree. Sourced by quickstart.sh and test.sh.
#
# Environment: BATON_BUILD_DIR (default build), BATON_CUDA_ARCHITECTURES
# (default 90: H100/H200), BATON_BUILD_TYPE (default Release).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BATON_BUILD_DIR:-$root/build}
cuda_archs=${BATON_CUDA_ARCHITECTURES:-90}
build_type=${BATON_BUILD_TYPE:-Release}

say() { printf 'baton: %s\n' "$*"; }

# The CUDA 13 toolkit is not an apt package on plain Debian: it must already be
# installed (NVIDIA's repository or runfile). Find nvcc where it usually lives.
if ! command -v nvcc >/dev/null 2>&1; then
  for dir in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /opt/cuda/bin; do
    [ -x "$dir/nvcc" ] && export PATH="$dir:$PATH" && break
  done
fi
if ! command -v nvcc >/dev/null 2>&1; then
  say "nvcc not found: install the CUDA 13 toolkit (https://developer.nvidia.com/cuda-downloads) and put its bin/ on PATH"
  exit 1
fi
nvcc_version=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1/p')
if [ "${nvcc_version:-0}" -lt 13 ]; then
  say "nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') found; Baton needs CUDA 13"
  exit 1
fi

# System packages, installed only when missing.
packages=(cmake ninja-build g++ libabsl-dev libgtest-dev nlohmann-json3-dev python3 python3-dev)
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ ! -f "$build_dir/build.ninja" ]; then
  say "configuring $build_dir (CUDA architectures $cuda_archs, $build_type)"
  cmake -S "$root" -B "$build_dir" -G Ninja \
    -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_CUDA_ARCHITECTURES="$cuda_archs"
fi
say "building $build_dir"
cmake --build "$build_dir" -j "$(nproc)"

# The Python package's test environment: BUILD/venv (seeing the system's packages), with what
# python/requirements-test.txt names installed from PyPI when it is missing. Without it (no network, no
# python3-venv) the build still succeeds and the Python tests report themselves skipped, saying why.
venv="$build_dir/venv"
if [ ! -x "$venv/bin/python" ] && ! python3 -m venv --system-site-packages "$venv" >/dev/null 2>&1; then
  rm -rf "$venv"
  if ! dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q "install ok installed"; then
    say "installing python3-venv"
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv ||
      say "could not install python3-venv"
  fi
  python3 -m venv --system-site-packages "$venv" || { rm -rf "$venv"; say "could not make $venv: Python tests will be skipped"; }
fi
if [ -x "$venv/bin/python" ] && ! "$venv/bin/python" -c "import tokenizers, jinja2, nanobind, scikit_build_core, pytest, fastapi, uvicorn, prometheus_client, httpx, openai" 2>/dev/null; then
  say "installing the Python test requirements into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 30 --retries 2 -r "$root/python/requirements-test.txt" ||
    say "pip could not install python/requirements-test.txt: Python tests will be skipped"
fi
# cuobjdump and nvdisasm (CUDA's own wheels), for the check of the kernels' machine code
# (scripts/check_sass.py): a plain toolkit install has neither; without them that check is skipped.
if [ -x "$venv/bin/python" ] && ! compgen -G "$venv/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm" >/dev/null; then
  say "installing cuobjdump and nvdisasm into $venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 30 --retries 2 \
    "nvidia-cuda-cuobjdump>=13.2,<14" "nvidia-cuda-nvdisasm>=13.2,<14" ||
    say "pip could not install cuobjdump and nvdisasm: the machine-code check will be skipped"
fi
