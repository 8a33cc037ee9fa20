// row_gemm's product for f32 weights on CPUs with AVX2 and FMA but without
// AVX-512F. Each output is the chain of fused multiply-adds in k order that
// row_gemm_f32.cpp computes with VFMADD231PS, eight columns a register here
// instead of sixteen: the same operations on every lane, so a row's outputs
// are bit for bit those of the AVX-512 kernel, and do not depend on the
// other rows of the call (oneDNN, the fallback before, picks its blocking by
// the row count, and a token verified among others got other logits than
// alone on these CPUs).
//
// The tiles take half a block (32 columns, four registers) for up to three
// rows: 12 sums, 3 inputs and one register of weights in AVX2's 16. As in
// row_gemm_tile.hpp the tiles take turns over chunks of k whose weights
// (8 KB) stay in L1, so the weights come from memory once per pass of up to
// 24 rows, and every tile asks for weights ahead. Measured on a 2-core AMD
// EPYC without AVX-512 (bench/linear_bench.cpp, docs/RESULTS.md "An f32 row
// kernel for AVX2"): 16 KB chunks and 12 rows a pass were slower, and
// without the other tiles' L2 prefetch 5 rows cost 1.5x one row, not 1.1x.
#if defined(__x86_64__)  // elsewhere row_gemm.cpp reports no kernel
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "row_gemm_kernels.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace specdec::cpu::row_gemm {
namespace {

constexpr std::int64_t kCols = 64;        // output columns per block (row_gemm.cpp's layout)
constexpr std::int64_t kHalf = 32;        // columns per tile: four registers of eight
constexpr int kMaxRows = 3;               // rows per tile
constexpr std::int64_t kChunkSteps = 32;  // 32 steps of 256 bytes: 8 KB of weights
constexpr std::int64_t kRowsPerPass = 8 * kMaxRows;
constexpr std::int64_t kPrefetchL1 = kChunkSteps;  // steps ahead
constexpr std::int64_t kPrefetchL2 = 4 * kChunkSteps;

// acc[r][0..31] (in memory) += x[r][s] * w[s][0..31] over steps [0, steps),
// in step order; from zero when `start`. w points at the tile's half of the
// block's first step (steps kCols floats apart).
template <int R, bool kFirst>
inline void tile(const float* w, std::int64_t steps, const float* x, std::int64_t x_stride, float* acc_mem,
                 bool start) {
  __m256 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j)
      acc[r][j] = start ? _mm256_setzero_ps() : _mm256_loadu_ps(acc_mem + r * kCols + 8 * j);
  for (std::int64_t p = 0; p < steps; ++p) {
    const float* wp = w + p * kCols;
    // The chunk's first tile (columns 0..31) asks for the whole 256-byte
    // step of the next chunk, both halves, into L1; the other tiles for the
    // steps further on into L2, so that memory keeps streaming while they
    // compute.
    for (int line = 0; line < 4; ++line) {
      if constexpr (kFirst)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchL1 * kCols + 16 * line), _MM_HINT_T0);
      else
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchL2 * kCols + 16 * line), _MM_HINT_T1);
    }
    __m256 xb[R];
    for (int r = 0; r < R; ++r) xb[r] = _mm256_broadcast_ss(x + r * x_stride + p);
    for (int j = 0; j < 4; ++j) {
      const __m256 wj = _mm256_loadu_ps(wp + 8 * j);
      for (int r = 0; r < R; ++r) acc[r][j] = _mm256_fmadd_ps(xb[r], wj, acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm256_storeu_ps(acc_mem + r * kCols + 8 * j, acc[r][j]);
}

template <bool kFirst>
void tile_rows(std::int64_t rows, const float* w, std::int64_t steps, const float* x, std::int64_t x_stride,
               float* acc_mem, bool start) {
  switch (rows) {
    case 1:
      return tile<1, kFirst>(w, steps, x, x_stride, acc_mem, start);
    case 2:
      return tile<2, kFirst>(w, steps, x, x_stride, acc_mem, start);
    default:
      return tile<3, kFirst>(w, steps, x, x_stride, acc_mem, start);
  }
}

}  // namespace

void run_block_f32_avx2(const std::uint32_t* w_words, std::int64_t steps, const unsigned char* x_bytes,
                        std::int64_t x_stride, std::int64_t m, float* y, std::int64_t y_stride,
                        std::int64_t cols, bool add) {
  const auto* w = reinterpret_cast<const float*>(w_words);
  const auto* x = reinterpret_cast<const float*>(x_bytes);
  alignas(32) float acc[kRowsPerPass * kCols];
  for (std::int64_t first = 0; first < m; first += kRowsPerPass) {
    const auto rows = std::min(kRowsPerPass, m - first);
    const float* xr = x + first * x_stride;
    for (std::int64_t p = 0; p < steps; p += kChunkSteps) {
      const auto n = std::min(kChunkSteps, steps - p);
      for (std::int64_t half = 0; half < kCols; half += kHalf) {
        const float* wp = w + p * kCols + half;
        for (std::int64_t r = 0; r < rows; r += kMaxRows) {
          const auto tile_m = std::min<std::int64_t>(kMaxRows, rows - r);
          const float* xt = xr + r * x_stride + p;
          float* at = acc + r * kCols + half;
          if (half == 0 && r == 0)
            tile_rows<true>(tile_m, wp, n, xt, x_stride, at, p == 0);
          else
            tile_rows<false>(tile_m, wp, n, xt, x_stride, at, p == 0);
        }
      }
    }
    // y = acc, or y + acc: the AVX-512 kernel's single add.
    for (std::int64_t r = 0; r < rows; ++r) {
      float* yr = y + (first + r) * y_stride;
      const float* ar = acc + r * kCols;
      std::int64_t c = 0;
      for (; c + 8 <= cols; c += 8) {
        __m256 v = _mm256_loadu_ps(ar + c);
        if (add) v = _mm256_add_ps(_mm256_loadu_ps(yr + c), v);
        _mm256_storeu_ps(yr + c, v);
      }
      for (; c < cols; ++c) yr[c] = add ? yr[c] + ar[c] : ar[c];
    }
  }
}

}  // namespace specdec::cpu::row_gemm
#pragma GCC pop_options
#endif  // __x86_64__
