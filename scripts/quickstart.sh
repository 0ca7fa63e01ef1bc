#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, and run the main sample.
# Without a usable GPU it builds, then says so and exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/bootstrap.sh"

main_sample=decode_loop
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "baton: built, but no NVIDIA GPU is visible here; $main_sample needs an H100/H200 (sm_90)." >&2
  echo "baton: on a GPU machine run: $build_dir/bin/$main_sample --help" >&2
  exit 2
fi
exec "$build_dir/bin/$main_sample" "$@"
