#!/usr/bin/env bash
# Packs a build's bin/ for a lent GPU machine: the executables stripped and the
# manifests, as one .tar.xz whose 192 MiB dictionary spans every binary (they
# share most of their code: Abseil, the runtime, the kernels). 2026-11-27: 359
# MiB of executables, 160 MB as a stripped .tar.gz, 16.6 MB this way (about 2
# minutes on 2 cores), well inside a call's 64 MiB carry.
#
#   scripts/pack_bin.sh [BUILD_DIR] OUT.tar.xz
#   (there) mkdir -p build && tar xJf OUT.tar.xz -C build
set -euo pipefail
if [ $# -eq 1 ]; then build=build; out=$1; else build=${1:?}; out=${2:?}; fi
out=$(realpath -m "$out")
[ -f "$build/bin/gpu_tests.txt" ] || { echo "pack_bin: $build/bin/gpu_tests.txt not found: build first" >&2; exit 2; }
# The GPU suite runs install_consumer as a sample; the CPU test that installs
# Baton and builds a consumer against it leaves it in bin/ (a build alone does
# not), and a pack without it fails that sample with exit 127 on the GPU.
if grep -q '^install_consumer' "$build/bin/samples.txt" 2>/dev/null && [ ! -x "$build/bin/install_consumer" ]; then
  echo "pack_bin: $build/bin/install_consumer not found: make it with" \
    "(cd $build && ctest -R cpu.install.consumer_builds_against_installed_package), then pack" >&2
  exit 2
fi
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
for f in "$build"/bin/*; do
  name=$(basename "$f")
  if [ -x "$f" ] && [ -f "$f" ]; then
    strip -o "$stage/bin/$name" "$f" 2>/dev/null || cp -a "$f" "$stage/bin/$name"
  else
    cp -a "$f" "$stage/bin/$name"
  fi
done
tar cf - -C "$stage" bin | xz -T2 -6 --lzma2=dict=192MiB >"$out"
echo "pack_bin: wrote $out ($(du -h "$out" | cut -f1))"
