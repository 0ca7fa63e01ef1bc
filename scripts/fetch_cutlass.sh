#!/usr/bin/env bash
# Fetches CUTLASS's headers from the nvidia-cutlass wheel on PyPI (no build of CUTLASS itself) into DIR and
# prints the folder that -DBATON_CUTLASS_INCLUDE takes (it holds include/ and tools/util/include/):
#
#   cmake -S . -B build -DBATON_CUTLASS_INCLUDE="$(scripts/fetch_cutlass.sh build/_deps)"
#
# which builds samples/microbench/cutlass_decode_gemm.cu (sm_90a; about a minute on two cores). Nothing else in
# the build uses CUTLASS.
set -euo pipefail
dir=${1:?usage: fetch_cutlass.sh DIR}
version=4.2.0.0
out="$dir/nvidia-cutlass-$version"
if [ ! -d "$out/cutlass_library/source" ]; then  # the wheel not yet unpacked
  mkdir -p "$out"
  python3 -m pip download --quiet --no-deps --dest "$out" "nvidia-cutlass==$version" >&2
  python3 -m zipfile -e "$out/nvidia_cutlass-$version-py3-none-any.whl" "$out" >&2
fi
cd "$out/cutlass_library/source" && pwd
