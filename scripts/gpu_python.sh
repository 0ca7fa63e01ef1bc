#!/usr/bin/env bash
# On a lent GPU machine (Python 3.12 with nanobind, scikit-build-core, tokenizers, torch, transformers; no
# Abseil, no registry): builds and installs the Python package from this tree against the prefix
# scripts/python_deps.sh packed, then runs tests/python (its GPU tests included; they compare with
# BUILD/bin/decode_loop from a carried C++ build).
#
#   scripts/gpu_python.sh DEPS.tgz BUILD [pytest arguments]      (from the repository root)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps_tgz=$(realpath "$1")
build=$(realpath "$2")
shift 2
deps=/tmp/baton-python-deps
[ -d "$deps/deps" ] || { mkdir -p "$deps" && tar xzf "$deps_tgz" -C "$deps"; }
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$deps/deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PIP_BREAK_SYSTEM_PACKAGES=1 HF_HUB_OFFLINE=1 CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
start=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps -C build-dir=/tmp/baton-python-build \
  -C cmake.define.CMAKE_PREFIX_PATH="$deps/deps" "$root" || { echo "baton: pip install . failed" >&2; exit 1; }
echo "baton: package built and installed in $(( $(date +%s) - start )) s"
cd /tmp && BATON_BUILD_DIR=$build exec python3 -m pytest -q -p no:cacheprovider -rs "$root/tests/python" "$@"
