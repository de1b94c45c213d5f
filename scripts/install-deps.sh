#!/usr/bin/env bash
# Installs every Debian package that lade's build, tests and benchmarks need.
# Idempotent: packages already present are skipped without touching apt.
set -euo pipefail

pkgs=(
  build-essential cmake pkg-config
  libjpeg62-turbo-dev            # JPEG decode (libjpeg-turbo)
  libturbojpeg0-dev              # TurboJPEG's whole-image decode, one of bench_jpeg_transform's ceilings
  libspng-dev                    # PNG decode (libspng)
  libcurl4-openssl-dev           # the s3 source (curl multi + AWS SigV4)
  libhdf5-dev                    # the hdf5 source (Debian's serial libhdf5)
  zlib1g-dev                     # deflated .npz members, the hdf5 source's gzip chunks
  libyaml-dev                    # DLIO's workload files (lade dlio)
  python3-h5py                   # HDF5 tests and bench: files written and read by h5py
  python3-boto3                  # S3 tests: uploads to the test server
  clang libclang-rt-14-dev       # libFuzzer targets, sanitizers
  python3 python3-dev python3-numpy python3-pytest python3-pil python3-setuptools
  python3-pip python3-venv python3-wheel  # pip install . (wheel: bdist_wheel for Debian 12's setuptools 66)
  python3-torch python3-torchvision
  gnuplot-nox                    # lade simulate/model --plot
  libopenmpi-dev openmpi-bin     # the MPI transport between learners (src/transport/mpi.c) and the mpirun tests
  python3-mpi4py                 # the Python module under mpirun beside mpi4py
  libucx-dev                     # the UCX transport between learners under torchrun (src/transport/ucx.c) and its tests
  nginx                          # http(s):// tar shard tests: a real HTTP server with Range support
  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user  # scripts/test_arm.sh: the aarch64 build's NEON kernels under qemu
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# S3 tests run s3rver (npm) and a Node fault proxy; any node + npm will do
if ! { command -v node && command -v npm; } >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
