#!/usr/bin/env bash
# Installs specdec's Debian dependencies (only what is missing) and builds it
# into build/ (Release, every backend whose toolchain is present).
#   bash scripts/setup.sh            extra CMake arguments: SPECDEC_CMAKE_ARGS="..."
#   SPECDEC_SETUP_NO_BUILD=1 bash scripts/setup.sh    packages only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config
  libfmt-dev libeigen3-dev libdlpack-dev nlohmann-json3-dev libcli11-dev
  catch2 libbenchmark-dev
  libtorch-dev libopenblas0-openmp libdnnl-dev   # OpenBLAS-OpenMP: without it libtorch GEMMs are ~40x slower
  ocl-icd-opencl-dev                              # dnnl-config.cmake calls find_package(OpenCL); libdnnl-dev only recommends it
  libsentencepiece-dev sentencepiece              # tokenizer oracle (tests) and trainer (spm_train)
  python3                                         # tests/cli's scripts (libtorch-dev brings it too)
  python3-dev python3-pybind11 pybind11-dev       # the Python package (python/, docs/python.md)
  python3-numpy python3-pytest                    # ... its arrays and its tests
  python3-torch                                   # ... torch tensors and torch.ops.specdec (the same libtorch 1.13)
  python3-matplotlib                              # python3 -m specdec.plot, scripts/plot_*.py
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

[ -n "${SPECDEC_SETUP_NO_BUILD:-}" ] && exit 0

# shellcheck disable=SC2086
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${SPECDEC_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"
