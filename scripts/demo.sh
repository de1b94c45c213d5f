#!/usr/bin/env bash
# Installs dependencies, builds lade and runs `lade demo` (generates a small
# synthetic ImageNet-like dataset into ./lade-demo once, then benchmarks it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
./build/lade demo
