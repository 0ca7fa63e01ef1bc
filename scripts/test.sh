#!/usr/bin/env bash
# Quick start, step 2: install what is missing, build, and run the whole test
# suite. Without a GPU the GPU tests are reported as skipped and the command
# still succeeds. Extra arguments go to ctest (e.g. -L cpu, -R Queue); the
# sanitize label runs only when named (-L sanitize).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bootstrap.sh"
cd "$build_dir"
# The sanitize label (GPU tests under compute-sanitizer) is slow: it runs only
# when asked for (./scripts/test.sh -L sanitize).
case " $* " in
  *sanitize*) exec ctest --output-on-failure -j "$(nproc)" "$@" ;;
  *) exec ctest --output-on-failure -j "$(nproc)" -LE sanitize "$@" ;;
esac
