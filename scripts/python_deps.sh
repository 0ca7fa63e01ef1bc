#!/usr/bin/env bash
# Packs what building the Python package needs and a lent GPU machine lacks: Debian's Abseil (headers, shared
# libraries, CMake package) and nlohmann-json (headers, CMake package), as one prefix in a .tgz to carry there.
# scripts/gpu_python.sh unpacks it and builds the package against it (docs/gpu-workflow.md).
#
#   scripts/python_deps.sh OUT.tgz
set -euo pipefail
out=$(realpath -m "$1")
lib=/usr/lib/x86_64-linux-gnu
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
p="$stage/deps"
mkdir -p "$p/include" "$p/lib/x86_64-linux-gnu/cmake" "$p/share/cmake"
cp -a /usr/include/absl /usr/include/nlohmann "$p/include/"
cp -a "$lib"/libabsl_*.so* "$p/lib/x86_64-linux-gnu/"
cp -a "$lib/cmake/absl" "$p/lib/x86_64-linux-gnu/cmake/"
cp -a /usr/share/cmake/nlohmann_json "$p/share/cmake/"
tar czf "$out" -C "$stage" deps
echo "baton: wrote $out ($(du -h "$out" | cut -f1))"
