// The inner loops of row_gemm.hpp, shared by the f32 and the bf16 product.
// Included by row_gemm_f32.cpp and row_gemm_bf16.cpp after their standard
// headers and inside their `#pragma GCC target` (AVX-512F; + AVX512_BF16),
// so each instantiates the loops for its own instruction set.
//
// A step is 32 bits of input (one f32, or a pair of bf16 values along k)
// times 256 bytes of weights (64 output columns of that step), added into
// four registers of f32 sums. Op::step is VFMADD231PS for f32 weights and
// VDPBF16PS for bf16 weight pairs.
//
// Internal to src/cpu.
#pragma once

namespace specdec::cpu::row_gemm::tile_loops {
namespace {

constexpr std::int64_t kCols = 64;  // output columns per block: four registers
constexpr int kMaxRows = 6;         // rows per tile: 6 x 4 sums + 4 weights + 1 input in 32 registers
// More rows than one tile: the tiles take turns over chunks of k (16 KB of
// weights, which stay in L1 while every tile uses them), so the weights come
// from memory once for up to kRowsPerPass rows. One tile after another over
// the whole k (the first version) read the block from memory once and then
// ran the other tiles' arithmetic with the memory idle.
constexpr std::int64_t kChunkSteps = 64;
constexpr std::int64_t kRowsPerPass = 4 * kMaxRows;
// Prefetch distances, in steps (256 bytes each). The first tile asks for
// the weights 16 KB ahead into L1; the other tiles of a chunk ask for those
// 32 KB ahead into L2, so the memory keeps streaming while they compute.
// Tuned on the default target (bench/model_bench.cpp, docs/RESULTS.md "Half
// precision"): 4 KB ahead, and no prefetch from the other tiles, made a
// 16-token forward 1.2x slower and a 5-token one 1.15x.
constexpr std::int64_t kPrefetchL1 = 64;
constexpr std::int64_t kPrefetchL2 = 128;

// One tile: acc[r][0..63] (in memory, f32) += the sums over steps [0, steps)
// of x[r][s] . w[s][c], in step order; starting from zero when `start`.
// kFirst: the chunk's first (or only) tile, which reads the weights from
// memory. Whatever the chunking, each output is the same chain of Op::step
// in k order: a row's result does not depend on the other rows.
template <class Op, int R, bool kFirst>
inline void tile(const std::uint32_t* w, std::int64_t steps, const unsigned char* x, std::int64_t x_stride,
                 float* acc_mem, bool start) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j)
      acc[r][j] = start ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_mem + r * kCols + 16 * j);
  for (std::int64_t p = 0; p < steps; ++p) {
    const std::uint32_t* wp = w + p * kCols;
    // The weights come from memory once: ask for them ahead, so the loads
    // keep streaming while the dot products run.
    for (int line = 0; line < 4; ++line) {
      if constexpr (kFirst)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchL1 * kCols + 16 * line), _MM_HINT_T0);
      else
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchL2 * kCols + 16 * line), _MM_HINT_T1);
    }
    const __m512i w0 = _mm512_loadu_si512(wp), w1 = _mm512_loadu_si512(wp + 16),
                  w2 = _mm512_loadu_si512(wp + 32), w3 = _mm512_loadu_si512(wp + 48);
    for (int r = 0; r < R; ++r) {
      std::int32_t step_x;  // the row's 32 bits of this step (x is any 32-bit data: f32, or bf16 pairs)
      std::memcpy(&step_x, x + 4 * (r * x_stride + p), sizeof step_x);
      const __m512i xb = _mm512_set1_epi32(step_x);
      acc[r][0] = Op::step(acc[r][0], xb, w0);
      acc[r][1] = Op::step(acc[r][1], xb, w1);
      acc[r][2] = Op::step(acc[r][2], xb, w2);
      acc[r][3] = Op::step(acc[r][3], xb, w3);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc_mem + r * kCols + 16 * j, acc[r][j]);
}

template <class Op, bool kFirst>
void tile_rows(std::int64_t rows, const std::uint32_t* w, std::int64_t steps, const unsigned char* x,
               std::int64_t x_stride, float* acc_mem, bool start) {
  switch (rows) {
    case 1:
      return tile<Op, 1, kFirst>(w, steps, x, x_stride, acc_mem, start);
    case 2:
      return tile<Op, 2, kFirst>(w, steps, x, x_stride, acc_mem, start);
    case 3:
      return tile<Op, 3, kFirst>(w, steps, x, x_stride, acc_mem, start);
    case 4:
      return tile<Op, 4, kFirst>(w, steps, x, x_stride, acc_mem, start);
    case 5:
      return tile<Op, 5, kFirst>(w, steps, x, x_stride, acc_mem, start);
    default:
      return tile<Op, 6, kFirst>(w, steps, x, x_stride, acc_mem, start);
  }
}

// y[r][0..cols) = acc[r] (+ y with `add`) for `rows` rows.
inline void store_rows(const float* acc_mem, std::int64_t rows, float* y, std::int64_t y_stride,
                       std::int64_t cols, bool add) {
  for (std::int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * y_stride;
    for (std::int64_t c = 0; c < cols; c += 16) {
      const __mmask16 mask = cols - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - c)) - 1u);
      __m512 v = _mm512_loadu_ps(acc_mem + r * kCols + c);
      if (add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, yr + c), v);
      _mm512_mask_storeu_ps(yr + c, mask, v);
    }
  }
}

// One block of 64 columns ([steps][64] weights) for m rows of x, each of
// 32-bit steps, x_stride steps apart.
template <class Op>
void run_block(const std::uint32_t* w, std::int64_t steps, const unsigned char* x, std::int64_t x_stride,
               std::int64_t m, float* y, std::int64_t y_stride, std::int64_t cols, bool add) {
  alignas(64) float acc[kRowsPerPass * kCols];
  for (std::int64_t first = 0; first < m; first += kRowsPerPass) {
    const auto rows = std::min(kRowsPerPass, m - first);
    const auto* xr = x + 4 * first * x_stride;
    if (rows <= kMaxRows) {  // one tile: straight through k
      tile_rows<Op, true>(rows, w, steps, xr, x_stride, acc, true);
    } else {
      for (std::int64_t p = 0; p < steps; p += kChunkSteps) {
        const auto n = std::min(kChunkSteps, steps - p);
        const auto* wp = w + p * kCols;
        tile_rows<Op, true>(kMaxRows, wp, n, xr + 4 * p, x_stride, acc, p == 0);
        for (std::int64_t r = kMaxRows; r < rows; r += kMaxRows)
          tile_rows<Op, false>(std::min<std::int64_t>(kMaxRows, rows - r), wp, n, xr + 4 * (r * x_stride + p),
                               x_stride, acc + r * kCols, p == 0);
      }
    }
    store_rows(acc, rows, y + first * y_stride, y_stride, cols, add);
  }
}

}  // namespace
}  // namespace specdec::cpu::row_gemm::tile_loops
