#!/usr/bin/env bash
# Builds here what the device check needs and packs it into .gpu/ (ignored by
# git), for a CUDA machine that has a driver but none of our build's libraries:
#   .gpu/bin/cuda_test, .gpu/bin/cuda_kernels_bench, .gpu/bin/cuda_model_bench
#   (built from build/)
#   .gpu/lib/  the shared libraries they load that such a machine may lack
#   .gpu/scripts/  the check and its summary
# Then, on the device machine, from the repository root:
#   bash scripts/gpu-check.sh .gpu "$OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ninja -C "$build" cuda_test cuda_kernels_bench cuda_model_bench
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
cp "$build/tests/cuda/cuda_test" "$build/bench/cuda_kernels_bench" "$build/bench/cuda_model_bench" .gpu/bin/
# fmt, Google Benchmark and the CUDA runtime come along; the C and C++
# runtimes and the driver are the machine's own.
for bin in .gpu/bin/*; do
  ldd "$bin" | awk '/=>/ {print $3}' | grep -E 'libfmt|libbenchmark|libcudart' || true
done | sort -u | while read -r lib; do cp -L "$lib" .gpu/lib/; done
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
du -sh .gpu
