#!/usr/bin/env bash
# Cross-builds lade for aarch64 (cmake/aarch64.cmake, optional dependencies
# off) into build-arm/ and runs the image pipeline's unit tests under
# qemu-user: test_imgkern (every NEON kernel against the C loops, and that
# an aarch64 build picks NEON in every stage) and test_imagenet, once on the
# NEON path and once with LADE_NO_SIMD=1. Correctness only: no timing under
# emulation. Then test_imgkern again from a build with AddressSanitizer +
# UndefinedBehaviorSanitizer (build-arm-asan/). Any failure fails the script.
#
#   bash scripts/test_arm.sh [--require]
#
# Needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user
# (scripts/install-deps.sh installs them). Without them it says so and exits
# 77 (skipped), or 1 with --require, which scripts/test.sh passes: after its
# dependency install a missing tool is a failure, never a skip.
set -euo pipefail
cd "$(dirname "$0")/.."
require=0
case "${1:-}" in
  --require) require=1 ;;
  "") ;;
  *) echo "usage: $0 [--require]" >&2; exit 2 ;;
esac
jobs=$(nproc 2>/dev/null || echo 2)
sysroot=/usr/aarch64-linux-gnu

missing=()
command -v aarch64-linux-gnu-gcc >/dev/null || missing+=(gcc-aarch64-linux-gnu)
[ -e "$sysroot/lib/ld-linux-aarch64.so.1" ] || missing+=(libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "test_arm: MISSING ${missing[*]} (apt-get install ${missing[*]}, or bash scripts/install-deps.sh)" >&2
  if [ "$require" -eq 1 ]; then
    echo "test_arm: FAILED: the aarch64 tests cannot run" >&2
    exit 1
  fi
  echo "test_arm: SKIPPED: the NEON kernels were NOT tested" >&2
  exit 77
fi

echo "== aarch64 cross build (build-arm)"
cmake -S . -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64.cmake -DCMAKE_BUILD_TYPE=Release \
  -DLADE_WITH_JPEG=OFF -DLADE_WITH_PNG=OFF -DLADE_WITH_CURL=OFF -DLADE_WITH_MPI=OFF -DLADE_WITH_UCX=OFF \
  -DLADE_WITH_HDF5=OFF -DLADE_WITH_ZLIB=OFF -DLADE_WITH_YAML=OFF -DLADE_WITH_PYTHON=OFF >/dev/null
cmake --build build-arm -j"$jobs" --target lade lade_cli test_imgkern test_imagenet
# (qemu-aarch64 refuses a binary for another machine, and test_imgkern checks
# that every stage runs its NEON kernel)

for mode in neon c; do
  for t in test_imgkern test_imagenet; do
    echo "== $t under qemu-aarch64 ($mode path)"
    if [ "$mode" = c ]; then
      LADE_NO_SIMD=1 qemu-aarch64 -L "$sysroot" "build-arm/tests/$t"
    else
      env -u LADE_NO_SIMD -u LADE_NO_RGB qemu-aarch64 -L "$sysroot" "build-arm/tests/$t"
    fi
  done
done
# The NEON kernels' memory accesses: test_imgkern gives each image exactly
# the pad its plan asks for, so a read past it is a heap overflow here.
echo "== test_imgkern under AddressSanitizer + UndefinedBehaviorSanitizer, qemu-aarch64 (neon path)"
cmake -S . -B build-arm-asan -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64.cmake -DCMAKE_BUILD_TYPE=Debug -DLADE_SANITIZE=ON \
  -DLADE_WITH_JPEG=OFF -DLADE_WITH_PNG=OFF -DLADE_WITH_CURL=OFF -DLADE_WITH_MPI=OFF -DLADE_WITH_UCX=OFF \
  -DLADE_WITH_HDF5=OFF -DLADE_WITH_ZLIB=OFF -DLADE_WITH_YAML=OFF -DLADE_WITH_PYTHON=OFF >/dev/null
cmake --build build-arm-asan -j"$jobs" --target test_imgkern
# (LeakSanitizer does not run under qemu-user)
env -u LADE_NO_SIMD -u LADE_NO_RGB ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 qemu-aarch64 -L "$sysroot" build-arm-asan/tests/test_imgkern

echo "== aarch64 tests passed (NEON and LADE_NO_SIMD=1; NEON under ASan + UBSan)"
