#!/usr/bin/env bash
# Installs dependencies, builds lade, and runs every test: the release build's
# full ctest suite, the image pipeline's tests in an aarch64 cross build under
# qemu-user (scripts/test_arm.sh), `pip install .` into a fresh venv
# (tests/pip/), then the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer, the engine test and the S3 integration test
# under ThreadSanitizer, and the http(s):// tar shard test under it too.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

bash scripts/install-deps.sh

echo "== release build and all tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
(cd build && ctest --output-on-failure -j"$jobs")

echo "== the aarch64 build under qemu-user: the image pipeline's NEON kernels against its C loops"
bash scripts/test_arm.sh --require

echo "== the pip route: pip install . into a fresh venv (offline), the installed module checked from outside the tree"
bash tests/pip/test_pip.sh --require "curl mpi ucx" --cli build/lade

echo "== unit tests and the Python lifetime tests under AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLADE_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --output-on-failure -L "unit|asan" -j"$jobs")

echo "== engine, fetch, device ring and hdf5 tests under ThreadSanitizer"
# (none of these uses the UCX transport, so none opens UCX, whose memory
# hooks would crash a ThreadSanitizer process: ucx.c opens it on first use)
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DLADE_TSAN=ON >/dev/null
cmake --build build-tsan -j"$jobs" --target test_engine test_fetch test_plan_exec test_devring
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "^(test_engine|test_fetch|test_plan_exec|test_devring)$")
# the hdf5 source's stage and libhdf5 lock under 4 workers (exit 77 = skipped, no libhdf5)
cmake --build build-tsan -j"$jobs" --target test_hdf5 && (cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "^test_hdf5$")
# the cache tiers' own threads test
cmake --build build-tsan -j"$jobs" --target test_cache test_memcache && (cd build-tsan && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure -R "^(test_cache|test_memcache)$")

echo "== the S3 integration test (s3rver, faultproxy, fakes3) under ThreadSanitizer"
cmake --build build-tsan -j"$jobs" --target s3_check lade_cli
s3_rc=0
S3_CHECK=build-tsan/tests/s3_check LADE_NODE_DIR="$PWD/build/tests/node" TSAN_OPTIONS=halt_on_error=1 \
  /usr/bin/python3 tests/s3/test_s3.py || s3_rc=$?
[ "$s3_rc" -eq 0 ] || [ "$s3_rc" -eq 77 ] || exit "$s3_rc"

echo "== the http(s):// tar shard test (nginx, faultproxy) under ThreadSanitizer"
http_rc=0
S3_CHECK=build-tsan/tests/s3_check LADE_NODE_DIR="$PWD/build/tests/node" TSAN_OPTIONS=halt_on_error=1 \
  /usr/bin/python3 tests/http/test_http.py || http_rc=$?
[ "$http_rc" -eq 0 ] || [ "$http_rc" -eq 77 ] || exit "$http_rc"

echo "== all test suites passed"
