#!/usr/bin/env bash
# Runs the Python tests against a CMake build, with the environment they need
# set here and nowhere else (tests/cmake/python.cmake runs this script too):
#
#   bash scripts/pytest.sh tests/python/test_tar.py -k gnu   # one file, some tests
#   bash scripts/pytest.sh                                   # every file of tests/python
#   LADE_BUILD=build-asan bash scripts/pytest.sh tests/python/test_lifetime.py
#
# The build is $LADE_BUILD, else this checkout's build/. Sets PYTHONPATH to its
# python/ (the module), LADE_CLI to its lade CLI, PYTHONDONTWRITEBYTECODE=1, and
# in a -DLADE_SANITIZE=ON build LD_PRELOAD of the compiler's libasan with
# ASAN_OPTIONS=detect_leaks=0 (an instrumented module only loads into python3
# with the runtime preloaded). Arguments go to pytest; $LADE_PYTHON3 (default
# /usr/bin/python3, whose numpy and torch are Debian's) runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath "${LADE_BUILD:-$root/build}")
python=${LADE_PYTHON3:-/usr/bin/python3}
if ! ls "$build"/python/lade/_lade*.so >/dev/null 2>&1; then
  echo "pytest.sh: no Python module in $build/python/lade (cmake -S . -B build && cmake --build build)" >&2
  exit 2
fi

export PYTHONPATH="$build/python" LADE_CLI="$build/lade" PYTHONDONTWRITEBYTECODE=1
if grep -q '^LADE_SANITIZE:BOOL=ON$' "$build/CMakeCache.txt" 2>/dev/null; then
  cc=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
  export LD_PRELOAD="$("${cc:-cc}" -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0
fi
[ $# -gt 0 ] || set -- "$root/tests/python"
exec "$python" -m pytest -q -p no:cacheprovider "$@"
