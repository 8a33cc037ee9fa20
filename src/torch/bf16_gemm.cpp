#include "bf16_gemm.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "specdec/io/float_convert.hpp"
#include "thread_buffer.hpp"

#define SPECDEC_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace specdec::torch_backend::bf16_gemm {
namespace {

constexpr std::int64_t kCols = 64;  // output columns per block: four registers
constexpr int kMaxRows = 6;         // rows per tile: 6 x 4 sums + 4 weights + 1 input in 32 registers
// More rows than one tile: the tiles take turns over chunks of k (16 KB of
// weights, which stay in L1 while every tile uses them), so the weights come
// from memory once for up to kRowsPerPass rows. One tile after another over
// the whole k (the first version) read the block from memory once and then
// ran the other tiles' arithmetic with the memory idle.
constexpr std::int64_t kChunkPairs = 64;
constexpr std::int64_t kRowsPerPass = 4 * kMaxRows;
// Prefetch distances, in k pairs (256 bytes each). The first tile asks for
// the weights 16 KB ahead into L1; the other tiles of a chunk ask for those
// 32 KB ahead into L2, so the memory keeps streaming while they compute.
// Tuned on the default target (bench/model_bench.cpp, docs/RESULTS.md "Half
// precision"): 4 KB ahead, and no prefetch from the other tiles, made a
// 16-token forward 1.2x slower and a 5-token one 1.15x.
constexpr std::int64_t kPrefetchL1 = 64;
constexpr std::int64_t kPrefetchL2 = 128;

// One tile: acc[r][0..63] (in memory, f32) += the sums over k pairs
// [0, pairs) of x[r][2p..2p+1] . w[p][c][0..1], in k order; starting from
// zero when `start`. kFirst: the chunk's first (or only) tile, which reads
// the weights from memory. Whatever the chunking, each output is the same
// chain of VDPBF16PS in k order: a row's result does not depend on the other
// rows.
template <int R, bool kFirst>
SPECDEC_BF16_TARGET inline void tile(const std::uint16_t* w, std::int64_t pairs, const std::uint16_t* x,
                                     std::int64_t x_stride, float* acc_mem, bool start) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j)
      acc[r][j] = start ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_mem + r * kCols + 16 * j);
  for (std::int64_t p = 0; p < pairs; ++p) {
    const std::uint16_t* wp = w + p * kCols * 2;
    // The weights come from memory once: ask for them ahead, so the loads
    // keep streaming while the dot products run.
    for (int line = 0; line < 4; ++line) {
      if constexpr (kFirst)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchL1 * kCols * 2 + 32 * line), _MM_HINT_T0);
      else
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchL2 * kCols * 2 + 32 * line), _MM_HINT_T1);
    }
    const __m512i w0 = _mm512_loadu_si512(wp), w1 = _mm512_loadu_si512(wp + 32),
                  w2 = _mm512_loadu_si512(wp + 64), w3 = _mm512_loadu_si512(wp + 96);
    for (int r = 0; r < R; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, x + r * x_stride + 2 * p, sizeof pair);
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xb, (__m512bh)w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xb, (__m512bh)w1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], xb, (__m512bh)w2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], xb, (__m512bh)w3);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(acc_mem + r * kCols + 16 * j, acc[r][j]);
}

template <bool kFirst>
SPECDEC_BF16_TARGET void tile_rows(std::int64_t rows, const std::uint16_t* w, std::int64_t pairs,
                                   const std::uint16_t* x, std::int64_t x_stride, float* acc_mem,
                                   bool start) {
  switch (rows) {
    case 1:
      return tile<1, kFirst>(w, pairs, x, x_stride, acc_mem, start);
    case 2:
      return tile<2, kFirst>(w, pairs, x, x_stride, acc_mem, start);
    case 3:
      return tile<3, kFirst>(w, pairs, x, x_stride, acc_mem, start);
    case 4:
      return tile<4, kFirst>(w, pairs, x, x_stride, acc_mem, start);
    case 5:
      return tile<5, kFirst>(w, pairs, x, x_stride, acc_mem, start);
    default:
      return tile<6, kFirst>(w, pairs, x, x_stride, acc_mem, start);
  }
}

// y[r][0..cols) = acc[r] (+ y with `add`) for `rows` rows.
SPECDEC_BF16_TARGET void store_rows(const float* acc_mem, std::int64_t rows, float* y, std::int64_t y_stride,
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

// One block of 64 columns for m rows.
SPECDEC_BF16_TARGET void run_block(const std::uint16_t* w, std::int64_t k_pairs, const std::uint16_t* x,
                                   std::int64_t x_stride, std::int64_t m, float* y, std::int64_t y_stride,
                                   std::int64_t cols, bool add) {
  alignas(64) float acc[kRowsPerPass * kCols];
  for (std::int64_t first = 0; first < m; first += kRowsPerPass) {
    const auto rows = std::min(kRowsPerPass, m - first);
    const auto* xr = x + first * x_stride;
    if (rows <= kMaxRows) {  // one tile: straight through k
      tile_rows<true>(rows, w, k_pairs, xr, x_stride, acc, true);
    } else {
      for (std::int64_t p = 0; p < k_pairs; p += kChunkPairs) {
        const auto pairs = std::min(kChunkPairs, k_pairs - p);
        const auto* wp = w + p * kCols * 2;
        tile_rows<true>(kMaxRows, wp, pairs, xr + 2 * p, x_stride, acc, p == 0);
        for (std::int64_t r = kMaxRows; r < rows; r += kMaxRows)
          tile_rows<false>(std::min<std::int64_t>(kMaxRows, rows - r), wp, pairs, xr + r * x_stride + 2 * p,
                           x_stride, acc + r * kCols, p == 0);
      }
    }
    store_rows(acc, rows, y + first * y_stride, y_stride, cols, add);
  }
}

}  // namespace

bool available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

void PackedWeights::Free::operator()(std::uint16_t* p) const {
  std::free(p);
}

PackedWeights::PackedWeights(const float* weight, std::int64_t out, std::int64_t in)
    : in_(in), out_(out), k_pairs_((in + 1) / 2), blocks_((out + kCols - 1) / kCols) {
  const auto n = static_cast<std::size_t>(blocks_ * k_pairs_ * kCols * 2);
  const std::size_t bytes = (n * sizeof(std::uint16_t) + 63) / 64 * 64;
  data_.reset(static_cast<std::uint16_t*>(std::aligned_alloc(64, bytes)));
  if (!data_) throw std::bad_alloc();
  std::uint16_t* d = data_.get();
  // [block][pair][column][0..1]; padding columns and the odd k tail are zero.
  for (std::int64_t b = 0; b < blocks_; ++b)
    for (std::int64_t p = 0; p < k_pairs_; ++p)
      for (std::int64_t c = 0; c < kCols; ++c) {
        const std::int64_t col = b * kCols + c;
        for (std::int64_t h = 0; h < 2; ++h) {
          const std::int64_t k = 2 * p + h;
          *d++ = col < out && k < in ? io::f32_to_bf16(weight[col * in + k]) : std::uint16_t{0};
        }
      }
}

SPECDEC_BF16_TARGET void round_rows(const float* x, std::int64_t m, std::int64_t in, std::int64_t stride,
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

void PackedWeights::multiply(const std::uint16_t* x, std::int64_t m, float* y, bool add) const {
  const std::uint16_t* w = data_.get();
  const auto block_size = k_pairs_ * kCols * 2;
  const auto x_stride = in_padded();
  const int threads = std::max(1, at::get_num_threads());
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && blocks_ > 1)
  for (std::int64_t b = 0; b < blocks_; ++b)
    run_block(w + b * block_size, k_pairs_, x, x_stride, m, y + b * kCols, out_,
              std::min(kCols, out_ - b * kCols), add);
}

namespace {
struct FillRowTag;  // a thread's f32 row for fill (the team's threads each have their own)
}  // namespace

void PackedWeights::multiply_rows(void (*fill)(const void*, std::int64_t, float*), const void* context,
                                  std::int64_t m, std::uint16_t* staged, float* y, bool add) const {
  const int threads = std::max(1, at::get_num_threads());
  const auto stride = in_padded();
  const auto fill_one = [&](std::int64_t r) {
    float* row = thread_buffer<FillRowTag>(in_);
    fill(context, r, row);
    round_rows(row, 1, in_, stride, staged + r * stride);
  };
  if (m < kFillInTeam || threads == 1 || blocks_ == 1) {
    for (std::int64_t r = 0; r < m; ++r) fill_one(r);
    multiply(staged, m, y, add);
    return;
  }
  const std::uint16_t* w = data_.get();
  const auto block_size = k_pairs_ * kCols * 2;
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < m; ++r) fill_one(r);  // its implied barrier: every row is staged
#pragma omp for schedule(static) nowait
    for (std::int64_t b = 0; b < blocks_; ++b)
      run_block(w + b * block_size, k_pairs_, staged, stride, m, y + b * kCols, out_,
                std::min(kCols, out_ - b * kCols), add);
  }
}

}  // namespace specdec::torch_backend::bf16_gemm
