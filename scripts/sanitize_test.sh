#!/usr/bin/env bash
# One CTest test of the `sanitize` label (tests/CMakeLists.txt):
#
#   scripts/sanitize_test.sh TOOL clean BINARY [ARGS...]    # must pass with 0 errors
#   scripts/sanitize_test.sh TOOL control BINARY [ARGS...]  # a planted bug: must be reported
#
# runs BINARY under `compute-sanitizer --tool TOOL`. A control passes only if
# the tool reports at least one error (proof that it attached); a clean run
# passes only if the binary passes and the tool reports 0 errors. Exits 77
# (CTest's SKIP_RETURN_CODE) where compute-sanitizer or a GPU is missing, or
# where scripts/sanitizer_skips.sh says this tool skips this binary.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/sanitizer_skips.sh
source "$here/sanitizer_skips.sh"
tool=$1
mode=$2
binary=$3
shift 3

sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$sanitizer" ]; then
  echo "skipped: compute-sanitizer not found"
  exit 77
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no NVIDIA GPU visible"
  exit 77
fi
if reason=$(sanitizer_skips "$tool" "$(basename "$binary")"); then
  echo "skipped: $tool skips $(basename "$binary") ($reason)"
  exit 77
fi
for dir in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done

# The full log stays in the working directory (CTest's: build/tests), also
# when a timeout kills this script.
log="$PWD/sanitize-$tool-$(basename "$binary").log"
echo "log: $log"
# API errors are not reported: the tests provoke them on purpose and assert
# the Status.
# The tests this tool leaves out of this binary (scripts/sanitizer_skips.sh).
filter=$(sanitizer_gtest_filter "$tool" "$(basename "$binary")")
"$sanitizer" --tool "$tool" --error-exitcode 99 --report-api-errors no "$binary" \
  ${filter:+"--gtest_filter=$filter"} "$@" >"$log" 2>&1
rc=$?
errors=$(sanitizer_errors "$log")
if [ "$mode" = control ]; then
  if [ "${errors:-0}" -gt 0 ]; then
    echo "control $tool: caught ($errors errors): the tool attached"
    exit 0
  fi
  cat "$log"
  echo "control $tool: NOT caught (exit $rc): the tool did not attach"
  exit 1
fi
if [ $rc -ne 0 ] || [ "${errors:-1}" != 0 ]; then
  grep -E "^=========|FAILED|Failure" "$log" | head -n 60
  echo "$tool $(basename "$binary"): exit $rc, ${errors:-?} sanitizer errors"
  exit 1
fi
echo "$tool $(basename "$binary"): passed, 0 sanitizer errors"
