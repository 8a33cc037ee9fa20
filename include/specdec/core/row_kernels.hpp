// The scans every round runs over whole vocabulary rows: the largest value
// (with the NaN/+inf check), the argmax, and the softmax's exponent-and-sum
// and scale passes. Each is written once, as plain loops in lanes that the
// compiler vectorizes, and compiled twice: for the baseline ISA the core
// headers target, and for AVX-512 (chosen at run time on x86-64, GCC and
// clang, outside nvcc). Both variants do the same operations in the same
// order, each product and sum rounded once (no fused multiply-add: GCC is
// told so for the AVX-512 variant), so they give the same bits; the tests
// compare them (tests/unit/core/row_kernels_test.cpp).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "specdec/core/bitexact.hpp"
#include "specdec/core/types.hpp"

#if defined(__x86_64__) && !defined(__CUDACC__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SPECDEC_ROW_KERNELS_AVX512 1
#if defined(__clang__)
#define SPECDEC_AVX512_FN [[gnu::target("avx512f,avx512dq,avx512bw,avx512vl")]]
#else
// GCC contracts a * b + c into an FMA under its default -ffp-contract=fast
// once FMA instructions exist; clang fuses within one expression only, and
// bitexact's mul_rn / add_rn are separate ones.
#define SPECDEC_AVX512_FN [[gnu::target("avx512f,avx512dq,avx512bw,avx512vl"), gnu::optimize("fp-contract=off")]]
#endif
#else
#define SPECDEC_ROW_KERNELS_AVX512 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SPECDEC_ROW_BODY [[gnu::always_inline]] inline
#else
#define SPECDEC_ROW_BODY inline
#endif

namespace specdec::row_kernels {

// The largest of x[0..n) (-inf for none or n = 0), and whether any value is
// NaN or +inf (the caller names it).
struct MaxScan {
  float max = -std::numeric_limits<float>::infinity();
  bool bad = false;
};

// What the softmax's exponent pass of one chunk computes: e_i =
// softmax_exponent(x_i, chunk_max, inv_t), 0 below `threshold` (top-k), and
// their sum in lane_sum's shape (bitexact::chunk_sum_of).
struct ExpPass {
  const float* x;
  std::int64_t n;
  float chunk_max, inv_t, threshold;
  float* e;
};

namespace body {

// 16 lanes: one AVX-512 register of floats, four SSE2 ones.
inline constexpr int kLanes = 16;

// The tail after the full blocks, then the lanes in order: both variants
// end this way, so even the sign of a zero maximum agrees.
SPECDEC_ROW_BODY MaxScan finish_max_scan(const float* x, std::int64_t n, std::int64_t full, const float* lane,
                                         const float* bad) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  MaxScan out;
  for (std::int64_t i = full; i < n; ++i) {
    out.bad |= !(x[i] < kInf);
    out.max = x[i] > out.max ? x[i] : out.max;
  }
  for (int j = 0; j < kLanes; ++j) {
    out.bad |= bad[j] != 0.0f;
    out.max = lane[j] > out.max ? lane[j] : out.max;
  }
  return out;
}

SPECDEC_ROW_BODY MaxScan max_scan(const float* x, std::int64_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // The flags are floats (1 where a lane saw NaN or +inf, which fail
  // v < inf), so the loop is compares and blends of one register width.
  float lane[kLanes], bad[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = -kInf, bad[j] = 0.0f;
  const std::int64_t full = n - n % kLanes;
  for (std::int64_t i = 0; i < full; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      bad[j] = v < kInf ? bad[j] : 1.0f;
      lane[j] = v > lane[j] ? v : lane[j];
    }
  return finish_max_scan(x, n, full, lane, bad);
}

// The first index holding `m` (a value of x): blocks of 64 are tested whole
// (a compare-and-or that vectorizes), and only the block that holds it is
// scanned one by one.
SPECDEC_ROW_BODY std::int64_t first_equal(const float* x, std::int64_t n, float m) {
  constexpr std::int64_t kBlock = 64;
  std::int64_t b = 0;
  for (; b + kBlock <= n; b += kBlock) {
    int hit = 0;
    for (std::int64_t i = 0; i < kBlock; ++i) hit |= x[b + i] == m;
    if (hit) break;
  }
  for (std::int64_t i = b; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

SPECDEC_ROW_BODY double exp_pass(const ExpPass& p) {
  const float* x = p.x;
  float* e = p.e;
  if (p.threshold > -std::numeric_limits<float>::infinity()) {
    for (std::int64_t i = 0; i < p.n; ++i)
      e[i] = x[i] < p.threshold ? 0.0f : bitexact::softmax_exponent(x[i], p.chunk_max, p.inv_t);
  } else {
    for (std::int64_t i = 0; i < p.n; ++i) e[i] = bitexact::softmax_exponent(x[i], p.chunk_max, p.inv_t);
  }
  return bitexact::chunk_sum_of([e](std::int64_t i) { return static_cast<double>(e[i]); }, 0, p.n);
}

SPECDEC_ROW_BODY void scale(float* e, std::int64_t n, float f) {
  for (std::int64_t i = 0; i < n; ++i) e[i] *= f;
}

}  // namespace body

// The baseline variants.
namespace baseline {
inline MaxScan max_scan(const float* x, std::int64_t n) { return body::max_scan(x, n); }
inline std::int64_t first_equal(const float* x, std::int64_t n, float m) { return body::first_equal(x, n, m); }
inline double exp_pass(const ExpPass& p) { return body::exp_pass(p); }
inline void scale(float* e, std::int64_t n, float f) { body::scale(e, n, f); }
}  // namespace baseline

#if SPECDEC_ROW_KERNELS_AVX512
namespace avx512 {
// With intrinsics: GCC does not vectorize the lanes' compare-and-blend at
// this width. max_ps(v, m) is v > m ? v : m, the body's expression.
SPECDEC_AVX512_FN inline MaxScan max_scan(const float* x, std::int64_t n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  static_assert(body::kLanes == 16);
  __m512 m = _mm512_set1_ps(-kInf);
  __mmask16 bad = 0;
  const std::int64_t full = n - n % body::kLanes;
  for (std::int64_t i = 0; i < full; i += body::kLanes) {
    const __m512 v = _mm512_loadu_ps(x + i);
    bad |= _mm512_cmp_ps_mask(v, _mm512_set1_ps(kInf), _CMP_NLT_UQ);  // NaN or +inf
    m = _mm512_mask_max_ps(m, 0xffff, v, m);  // _mm512_max_ps warns under GCC 12 (its undefined source)
  }
  float lane[body::kLanes], flags[body::kLanes];
  _mm512_storeu_ps(lane, m);
  for (int j = 0; j < body::kLanes; ++j) flags[j] = (bad >> j) & 1 ? 1.0f : 0.0f;
  return body::finish_max_scan(x, n, full, lane, flags);
}
SPECDEC_AVX512_FN inline std::int64_t first_equal(const float* x, std::int64_t n, float m) {
  return body::first_equal(x, n, m);
}
SPECDEC_AVX512_FN inline double exp_pass(const ExpPass& p) { return body::exp_pass(p); }
SPECDEC_AVX512_FN inline void scale(float* e, std::int64_t n, float f) { body::scale(e, n, f); }
}  // namespace avx512
#endif

// Whether this CPU runs the AVX-512 variants (checked once).
inline bool has_avx512() {
#if SPECDEC_ROW_KERNELS_AVX512
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
#else
  return false;
#endif
}

#if SPECDEC_ROW_KERNELS_AVX512
#define SPECDEC_ROW_DISPATCH(fn, ...) (has_avx512() ? avx512::fn(__VA_ARGS__) : baseline::fn(__VA_ARGS__))
#else
#define SPECDEC_ROW_DISPATCH(fn, ...) baseline::fn(__VA_ARGS__)
#endif

inline MaxScan max_scan(const float* x, std::int64_t n) { return SPECDEC_ROW_DISPATCH(max_scan, x, n); }
inline double exp_pass(const ExpPass& p) { return SPECDEC_ROW_DISPATCH(exp_pass, p); }
inline void scale(float* e, std::int64_t n, float f) { SPECDEC_ROW_DISPATCH(scale, e, n, f); }
// The first index of x[0..n) holding m (0 if none).
inline std::int64_t first_equal(const float* x, std::int64_t n, float m) {
  return SPECDEC_ROW_DISPATCH(first_equal, x, n, m);
}

// Index of the largest of x[0..n); ties go to the lowest index, -inf is never
// preferred over a finite value, an all -inf row (or n = 0) gives 0. NaN
// entries must be ruled out by the caller (max_scan says whether any exist).
inline TokenId argmax(const float* x, std::int64_t n) {
  if (n <= 0) return 0;
  return static_cast<TokenId>(first_equal(x, n, max_scan(x, n).max));
}

#undef SPECDEC_ROW_DISPATCH

}  // namespace specdec::row_kernels
