#include "bf16_gemm.hpp"

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "specdec/io/float_convert.hpp"

#define SPECDEC_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace specdec::torch_backend::bf16_gemm {
namespace {

constexpr std::int64_t kCols = 64;  // output columns per block: four registers
constexpr int kMaxRows = 6;
constexpr std::int64_t kPrefetchAhead =
    16;  // k pairs (4 KB)         // rows per pass: 6 x 4 sums + 4 weights + 1 input in 32 registers

// One block of 64 columns for R rows: acc[r][j] += sum over k pairs of
// x[r][2p..2p+1] . w[p][16 j .. 16 j + 15][0..1], in k order.
template <int R>
SPECDEC_BF16_TARGET inline void block(const std::uint16_t* w, std::int64_t k_pairs, const std::uint16_t* x,
                                      std::int64_t x_stride, float* y, std::int64_t y_stride,
                                      std::int64_t cols, bool add) {
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < k_pairs; ++p) {
    const std::uint16_t* wp = w + p * kCols * 2;
    // The weights come from memory once: ask for them ahead, so the loads
    // keep streaming while the dot products run.
    for (int line = 0; line < 4; ++line)
      _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchAhead * kCols * 2 + 32 * line), _MM_HINT_T0);
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
  for (int r = 0; r < R; ++r) {
    float* yr = y + r * y_stride;
    for (int j = 0; j < 4; ++j) {
      const std::int64_t c = 16 * j;
      if (c >= cols) break;
      const __mmask16 mask = cols - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - c)) - 1u);
      __m512 v = acc[r][j];
      if (add) v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, yr + c), v);
      _mm512_mask_storeu_ps(yr + c, mask, v);
    }
  }
}

SPECDEC_BF16_TARGET void run_block(const std::uint16_t* w, std::int64_t k_pairs, const std::uint16_t* x,
                                   std::int64_t x_stride, std::int64_t m, float* y, std::int64_t y_stride,
                                   std::int64_t cols, bool add) {
  for (std::int64_t r = 0; r < m; r += kMaxRows) {
    const auto rows = std::min<std::int64_t>(kMaxRows, m - r);
    const auto* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    switch (rows) {
      case 1:
        block<1>(w, k_pairs, xr, x_stride, yr, y_stride, cols, add);
        break;
      case 2:
        block<2>(w, k_pairs, xr, x_stride, yr, y_stride, cols, add);
        break;
      case 3:
        block<3>(w, k_pairs, xr, x_stride, yr, y_stride, cols, add);
        break;
      case 4:
        block<4>(w, k_pairs, xr, x_stride, yr, y_stride, cols, add);
        break;
      case 5:
        block<5>(w, k_pairs, xr, x_stride, yr, y_stride, cols, add);
        break;
      default:
        block<6>(w, k_pairs, xr, x_stride, yr, y_stride, cols, add);
        break;
    }
  }
}

}  // namespace

bool available() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512bf16");
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
  for (std::int64_t r = 0; r < m; ++r) {
    const float* xr = x + r * in;
    std::uint16_t* o = out + r * stride;
    // io::f32_to_bf16 written branch-free so it vectorizes: nearest, ties to
    // even; NaN stays a (quiet) NaN.
    for (std::int64_t k = 0; k < in; ++k) {
      std::uint32_t bits;
      std::memcpy(&bits, xr + k, sizeof bits);
      const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
      const std::uint32_t nan = (bits >> 16) | 0x0040u;
      o[k] = static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
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

}  // namespace specdec::torch_backend::bf16_gemm
