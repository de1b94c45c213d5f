#!/usr/bin/env bash
# The pip route end to end, as a user takes it: a fresh virtual environment
# (with Debian's numpy/torch through --system-site-packages), an offline
# `pip install --no-build-isolation --no-index` of this checkout (which drives
# the CMake build in build-pip/, setup.py), then tests/pip/check_installed.py
# run from outside the source tree with the venv's python.
#
#   bash tests/pip/test_pip.sh [--require "curl mpi"] [--cli build/lade]
#
# --require and --cli are passed to check_installed.py. PYTHON picks the base
# interpreter (default /usr/bin/python3). The venv is removed afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-/usr/bin/python3}
check_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --require) check_args+=(--require "$2"); shift 2 ;;
    --cli) check_args+=(--cli "$(realpath "$2")"); shift 2 ;;
    *) echo "usage: $0 [--require FEATURES] [--cli PATH]" >&2; exit 2 ;;
  esac
done

venv=$(mktemp -d "${TMPDIR:-/tmp}/lade-pip-venv.XXXXXX")
trap 'rm -rf "$venv"' EXIT
"$python" -m venv --system-site-packages "$venv"
log="$venv/pip-install.log"
if ! "$venv/bin/pip" install -v --no-build-isolation --no-index --no-cache-dir "$root" >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "test_pip: pip install failed (log above)" >&2
  exit 1
fi
# CMake's configure summary, as pip -v showed it
grep -A6 -- "-- lade .* configuration:" "$log" | sed 's/^ *-- //' || true
cd "$venv"
"$venv/bin/python" "$root/tests/pip/check_installed.py" --venv "$venv" "${check_args[@]}"
