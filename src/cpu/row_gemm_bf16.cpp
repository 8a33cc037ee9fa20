// row_gemm's product for bf16 weights: VDPBF16PS, a pair of k a step, f32
// sums; and the rounding of the input rows to bf16.
#if defined(__x86_64__)  // elsewhere row_gemm.cpp reports no kernel
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "row_gemm_kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#include "row_gemm_tile.hpp"

namespace specdec::cpu::row_gemm {
namespace {

struct Bf16PairStep {
  static __m512 step(__m512 acc, __m512i x, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
  }
};

}  // namespace

void run_block_bf16(const std::uint32_t* w, std::int64_t steps, const unsigned char* x, std::int64_t x_stride,
                    std::int64_t m, float* y, std::int64_t y_stride, std::int64_t cols, bool add) {
  tile_loops::run_block<Bf16PairStep>(w, steps, x, x_stride, m, y, y_stride, cols, add);
}

void round_rows_bf16(const float* x, std::int64_t m, std::int64_t in, std::int64_t stride,
                     std::uint16_t* out) {
  // VCVTNEPS2BF16: nearest, ties to even, NaN stays a (quiet) NaN, as
  // io::f32_to_bf16; denormals become zero, which VDPBF16PS would make of
  // them anyway.
  for (std::int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * in;
    std::uint16_t* o = out + r * stride;
    for (std::int64_t k = 0; k < in; k += 16) {
      const __mmask16 mask = in - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (in - k)) - 1u);
      const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, xr + k));
      _mm256_mask_storeu_epi16(o + k, mask, (__m256i)rounded);
    }
    for (std::int64_t k = in; k < stride; ++k) o[k] = 0;
  }
}

}  // namespace specdec::cpu::row_gemm
#pragma GCC pop_options
#endif  // __x86_64__
