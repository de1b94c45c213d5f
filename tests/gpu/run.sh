#!/usr/bin/env bash
# tests/gpu/run.sh - the device checks of batches on the GPU (docs/device.md),
# one call on a machine with an NVIDIA GPU, PyTorch and torchvision:
#
#   bash tests/gpu/run.sh            # build, parity, training (about 5 minutes)
#   bash tests/gpu/run.sh parity     # build and parity only
#   bash tests/gpu/run.sh train      # build and training only
#
# Builds lade there (Release, CMake; libjpeg from the system, else from
# .gpudeps/ beside this checkout: include/ and lib/libjpeg.so), then:
#   parity.py  every device batch equals the host batch of the same run
#              (JPEG train/eval, float32/uint8, npy; several epochs;
#              device_prefetch 1, 2, 4; a consumer that lags on the GPU and
#              frees and reallocates torch tensors between steps)
#   interop.py CuPy and JAX take the same batches through DLPack; then
#              examples/train_cnn.py --device cuda
#   train.py   torchvision ResNet-50, bf16, channels_last, batch 256: lade
#              (8 and 16 threads) against synthetic data and against
#              DataLoader (16 workers, pin_memory), in the same run
# Logs go to $OUT (or /tmp/lade-gpu) as well as to stdout.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-/tmp/lade-gpu}
mkdir -p "$out"
cd "$root"
say() { echo "== $*"; }

say machine
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
grep -m1 "model name" /proc/cpuinfo || true
echo "cores: $(nproc)"
python3 -c "import sys, torch, torchvision; print('python', sys.version.split()[0], 'torch', torch.__version__, \
'torchvision', torchvision.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"

say build
jpeg=()
if [ ! -e /usr/include/jpeglib.h ] && [ -e .gpudeps/include/jpeglib.h ]; then
  jpeg=(-DJPEG_INCLUDE_DIR="$root/.gpudeps/include" -DJPEG_LIBRARY="$root/.gpudeps/lib/libjpeg.so")
  export LD_LIBRARY_PATH="$root/.gpudeps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if ! { cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLADE_BUILD_TESTS=OFF \
         -DLADE_WITH_JPEG=ON -DLADE_WITH_PYTHON=ON -DPython3_EXECUTABLE="$(command -v python3)" "${jpeg[@]}" \
         >"$out/cmake.log" 2>&1 && cmake --build build-gpu -j "$(nproc)" >>"$out/cmake.log" 2>&1; }; then
  tail -40 "$out/cmake.log"
  echo "run.sh: the build failed (log: $out/cmake.log)"
  exit 2
fi
export PYTHONPATH="$root/build-gpu/python" PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# no LADE_CUDA_LIB: lade takes the CUDA runtime torch loaded (parity.py prints the copies mapped)
unset LADE_CUDA_LIB
python3 -c "import lade; print('lade features:', lade.features())"

rc=0
if [ "${1:-all}" != train ]; then
  say parity
  python3 tests/gpu/parity.py 2>&1 | tee "$out/parity.log" || rc=1
  say "interop (CuPy, JAX)"
  python3 tests/gpu/interop.py 2>&1 | tee "$out/interop.log" || rc=1
  say "examples/train_cnn.py --device cuda"
  python3 examples/train_cnn.py --data /tmp/lade-gpu-data/jpeg --transform imagenet-train --device cuda \
    --steps 20 --threads 8 2>&1 | tail -3 | tee "$out/example.log" || rc=1
fi
if [ "${1:-all}" != parity ]; then
  say training
  python3 tests/gpu/train.py 2>&1 | tee "$out/train.log" || rc=1
fi
say "done rc=$rc"
exit $rc
