// row_gemm's product for f32 weights: VFMADD231PS, one k a step.
#if defined(__x86_64__)  // elsewhere row_gemm.cpp reports no kernel
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "row_gemm_kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f")
#include "row_gemm_tile.hpp"

namespace specdec::cpu::row_gemm {
namespace {

struct F32Step {
  static __m512 step(__m512 acc, __m512i x, __m512i w) {
    return _mm512_fmadd_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(w), acc);
  }
};

}  // namespace

void run_block_f32(const std::uint32_t* w, std::int64_t steps, const unsigned char* x, std::int64_t x_stride,
                   std::int64_t m, float* y, std::int64_t y_stride, std::int64_t cols, bool add) {
  tile_loops::run_block<F32Step>(w, steps, x, x_stride, m, y, y_stride, cols, add);
}

}  // namespace specdec::cpu::row_gemm
#pragma GCC pop_options
#endif  // __x86_64__
