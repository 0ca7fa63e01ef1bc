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
#   BATON_SUITE_SANITIZE="memcheck racecheck synccheck initcheck"  instead of the
#       plain run, run every GPU test under each compute-sanitizer tool named.
#       Each tool first runs bin/sanitizer_control, a planted bug it must report
#       (else the tool did not attach and the run fails); then every test must
#       pass with 0 sanitizer errors. Samples are skipped in this mode.
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

# sanitizer_errors and sanitizer_skips (which binaries a tool skips, and why).
# shellcheck source=scripts/sanitizer_skips.sh
source "$here/sanitizer_skips.sh"

status=0
if [ -n "${BATON_SUITE_SANITIZE:-}" ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [ -x "$sanitizer" ] || { echo "gpu_suite: compute-sanitizer not found" >&2; exit 2; }
  : > "$out/sanitize.txt"
  for tool in $BATON_SUITE_SANITIZE; do
    # The control: the tool must find the planted bug.
    "$sanitizer" --tool "$tool" "$bin/sanitizer_control" "$tool" > "$out/logs/control-$tool.log" 2>&1
    control=$(sanitizer_errors "$out/logs/control-$tool.log")
    if [ "${control:-0}" -gt 0 ]; then
      echo "control $tool: caught ($control errors)" | tee -a "$out/sanitize.txt"
    else
      echo "control $tool: NOT caught: the tool did not attach" | tee -a "$out/sanitize.txt"
      status=1
      continue
    fi
    while read -r name; do
      [ -n "$name" ] || continue
      if reason=$(sanitizer_skips "$tool" "$name"); then
        echo "$tool $name: skipped ($reason)" | tee -a "$out/sanitize.txt"
        continue
      fi
      log="$out/logs/$tool-$name.log"
      # API errors are not reported: the tests provoke them on purpose (an
      # oversized allocation, a launch outside a graph) and assert the Status.
      filter=$(sanitizer_gtest_filter "$tool" "$name" "${BATON_SUITE_FILTER:-}")
      timeout "$timeout_s" "$sanitizer" --tool "$tool" --error-exitcode 99 \
          --report-api-errors no "$bin/$name" ${filter:+"--gtest_filter=$filter"} > "$log" 2>&1
      rc=$?
      errors=$(sanitizer_errors "$log")
      echo "$tool $name: exit $rc, ${errors:-?} sanitizer errors${filter:+ (--gtest_filter=$filter)}" |
        tee -a "$out/sanitize.txt"
      if [ $rc -ne 0 ] || [ "${errors:-1}" != 0 ]; then
        status=1
        grep -E "^=========|FAILED" "$log" | head -n 40
      fi
    done < "$bin/gpu_tests.txt"
  done
  exit $status
fi

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
  gpus=$(nvidia-smi -L | grep -c '^GPU')
  rm -f "$out/samples_skipped.txt"
  # A manifest entry is NAME, or NAME@LABEL for another run of the same
  # sample (baton_add_sample_run), logged as NAME-LABEL.
  while IFS=$'\t' read -r entry args; do
    [ -n "$entry" ] || continue
    name=${entry%%@*}
    run=${entry/@/-}
    # A run split across more GPUs (--tp=N) than are visible is skipped and
    # listed (summarize_gpu_suite.py reports it beside the multi-GPU tests).
    need=$(grep -oE -- '--tp=[0-9]+' <<< "$args" | head -1 | cut -d= -f2)
    if [ -n "$need" ] && [ "$need" -gt "$gpus" ]; then
      echo "== sample $run: needs $need GPUs, $gpus visible: skipped"
      printf '%s\t%s\n' "$run" "needs $need GPUs, $gpus visible" >> "$out/samples_skipped.txt"
      continue
    fi
    echo "== sample $name $args"
    # shellcheck disable=SC2086 # args are a word list from the manifest
    timeout "$timeout_s" "$bin/$name" $args --json="$out/samples/$run.json" > "$out/logs/$run.log" 2>&1
    rc=$?
    echo "$rc" > "$out/logs/$run.rc"
    cat "$out/logs/$run.log"
    [ $rc -eq 0 ] || status=1
  done < "$bin/samples.txt"
fi

python3 "$here/summarize_gpu_suite.py" "$out" || status=1
exit $status
