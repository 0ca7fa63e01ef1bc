#!/usr/bin/env bash
# Installs the Python package from the tree into the test environment scripts/bootstrap.sh makes in the build
# tree (BUILD/venv) and runs its tests (tests/python) there. The install is `pip install .` with
# BATON_PREBUILT=BUILD: baton._baton is built in BUILD/python against the static libraries BUILD already
# holds (the CUDA library is not compiled a second time; the module is relinked when they change). The GPU
# tests skip without a GPU. Exits 77 (ctest: skipped) when that environment is missing or incomplete,
# saying how to make it.
# Usage: scripts/pytest.sh BUILD [pytest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
shift
python="$build/venv/bin/python"
if [ ! -x "$python" ] || ! "$python" -c "import tokenizers, jinja2, nanobind, scikit_build_core, pytest, fastapi, uvicorn, prometheus_client, httpx, openai" 2>/dev/null; then
  echo "baton: skipped: no Python test environment at $build/venv with python/requirements-test.txt;" \
    "./scripts/test.sh makes it (it needs python3-venv and PyPI)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
BATON_PREBUILT=$build "$python" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir="$build/python" "$root"
export BATON_BUILD_DIR=$build  # the GPU tests compare with BUILD/bin/decode_loop
cd "$build"  # not the source tree: `import baton` must find the installed package
exec "$python" -m pytest -q -p no:cacheprovider "$root/tests/python" "$@"
