#!/usr/bin/env bash
# Builds here what the device check needs and packs it into .gpu/ (ignored by
# git), for a CUDA machine that has a driver but none of our build's libraries:
#   .gpu/bin/cuda_test, .gpu/bin/cuda_kernels_bench, .gpu/bin/cuda_model_bench,
#   .gpu/bin/cuda_methods_bench (built from build/), and .gpu/bin/specdec (the
#              command line) when that build has it without libtorch (CI's
#              build-cuda: -DSPECDEC_WITH_TORCH=OFF -DSPECDEC_BUILD_EXAMPLES=ON),
#              as no libtorch of this machine's runs there
#   .gpu/lib/  the shared libraries they load that such a machine may lack,
#              and the static libraries scripts/gpu-python.sh links the
#              Python package from (libspecdec_{cuda,cpu,io,tokenizer}.a)
#   .gpu/include/  the headers it compiles with that such a machine lacks
#              (fmt, dlpack)
# Then, on the device machine, from the repository root:
#   bash scripts/gpu-check.sh .gpu "$OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
ninja -C "$build" cuda_test cuda_kernels_bench cuda_model_bench cuda_methods_bench specdec_cuda specdec_cpu specdec_io \
  specdec_tokenizer
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib .gpu/include
cp "$build/tests/cuda/cuda_test" "$build/bench/cuda_kernels_bench" "$build/bench/cuda_model_bench" \
  "$build/bench/cuda_methods_bench" .gpu/bin/
if ninja -C "$build" -t targets all 2>/dev/null | grep '^specdec_cli:' >/dev/null; then
  ninja -C "$build" specdec_cli
  if ldd "$build/bin/specdec" | grep -q libtorch; then
    echo "gpu-pack: $build/bin/specdec links libtorch; not packed (build it with -DSPECDEC_WITH_TORCH=OFF)"
  else
    cp "$build/bin/specdec" .gpu/bin/
  fi
fi
# fmt, Google Benchmark and the CUDA runtime come along; the C and C++
# runtimes and the driver are the machine's own.
for bin in .gpu/bin/*; do
  ldd "$bin" | awk '/=>/ {print $3}' | grep -E 'libfmt|libbenchmark|libcudart' || true
done | sort -u | while read -r lib; do cp -L "$lib" .gpu/lib/; done
cp "$build/cuda/libspecdec_cuda.a" "$build/src/libspecdec_cpu.a" "$build/src/libspecdec_io.a" "$build/src/libspecdec_tokenizer.a" \
  .gpu/lib/
cp -r /usr/include/fmt /usr/include/dlpack .gpu/include/
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
du -sh .gpu
