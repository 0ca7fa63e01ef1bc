#!/usr/bin/env bash
# Runs every GPU test and every sample from a build tree made on another
# machine, on a machine with an H100/H200 and no package registry, and writes
# logs, gtest/sample JSON and a summary into OUT_DIR.
#
#   scripts/gpu_suite.sh [BUILD_DIR] [OUT_DIR]     (defaults: build, gpu-suite-out)
#
# Only BUILD_DIR/bin is needed (executables plus the gpu_tests.txt and
# samples.txt manifests CMake writes there). Environment:
#   BATON_SUITE_FILTER  gtest filter for the tests (default: all)
#   BATON_SUITE_SKIP_SAMPLES=1  run only the tests
#   BATON_SUITE_TIMEOUT  seconds per executable (default 300)
# Exit status: 0 when every test passed (none skipped) and every sample passed.
set -uo pipefail
build=${1:-build}
out=${2:-gpu-suite-out}
bin="$build/bin"
timeout_s=${BATON_SUITE_TIMEOUT:-300}
here=$(cd "$(dirname "$0")" && pwd)

if [ ! -f "$bin/gpu_tests.txt" ]; then
  echo "gpu_suite: $bin/gpu_tests.txt not found: build first (cmake --build $build)" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_suite: no NVIDIA GPU visible here; run this on the GPU machine" >&2
  exit 2
fi
# The carried binaries link cuBLASLt dynamically; find the toolkit's copy.
for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

# Start from empty output folders: a summary must never count files left by an
# earlier run into the same OUT_DIR.
rm -rf "$out/tests" "$out/samples" "$out/logs" "$out/summary.json" "$out/summary.txt" "$out/device.csv"
mkdir -p "$out/tests" "$out/samples" "$out/logs"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$out/device.csv" 2>&1
nvidia-smi > "$out/logs/nvidia-smi.txt" 2>&1

status=0
while read -r name; do
  [ -n "$name" ] || continue
  echo "== test $name"
  timeout "$timeout_s" "$bin/$name" --gtest_output="json:$out/tests/$name.json" \
      ${BATON_SUITE_FILTER:+--gtest_filter=$BATON_SUITE_FILTER} > "$out/logs/$name.log" 2>&1
  rc=$?
  echo "$rc" > "$out/logs/$name.rc"
  [ $rc -eq 0 ] || { status=1; echo "   FAILED (exit $rc): tail of $out/logs/$name.log"; tail -n 30 "$out/logs/$name.log"; }
done < "$bin/gpu_tests.txt"

if [ "${BATON_SUITE_SKIP_SAMPLES:-0}" != 1 ]; then
  while IFS=$'\t' read -r name args; do
    [ -n "$name" ] || continue
    echo "== sample $name $args"
    # shellcheck disable=SC2086 # args are a word list from the manifest
    timeout "$timeout_s" "$bin/$name" $args --json="$out/samples/$name.json" > "$out/logs/$name.log" 2>&1
    rc=$?
    echo "$rc" > "$out/logs/$name.rc"
    cat "$out/logs/$name.log"
    [ $rc -eq 0 ] || status=1
  done < "$bin/samples.txt"
fi

python3 "$here/summarize_gpu_suite.py" "$out" || status=1
exit $status
