#!/usr/bin/env bash
# Runs the Python package's tests (tests/python) in the test environment scripts/bootstrap.sh makes in the
# build tree (BUILD/venv). Exits 77 (ctest: skipped) when that environment is missing or incomplete, saying
# how to make it. Usage: scripts/pytest.sh BUILD [pytest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1
shift
python="$build/venv/bin/python"
if [ ! -x "$python" ] || ! "$python" -c "import tokenizers, jinja2, pytest" 2>/dev/null; then
  echo "baton: skipped: no Python test environment at $build/venv with python/requirements-test.txt;" \
    "./scripts/test.sh makes it (it needs python3-venv and PyPI)"
  exit 77
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$python" -m pytest -q -p no:cacheprovider "$root/tests/python" "$@"
