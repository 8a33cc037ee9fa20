// The scans every round runs over whole vocabulary rows: the largest value
// (with the NaN/+inf check), the argmax, the softmax's exponent-and-sum and
// scale passes, a draw's fixed-point masses, lane_sum, and the distribution
// check. Each is written once, as plain loops in lanes that the
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

// A probability row's sum (eight double lanes, then in order), whether every
// value is finite, and whether any is negative (check_distribution).
struct DistributionScan {
  double sum = 0.0;
  bool finite = true, negative = false;
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

// bitexact::chunk_sum_of of the values f(0..m), m <= kSumChunk: each lane's
// additions in the same order (its full blocks, then its tail value), but 16
// lanes at a time held in registers across the blocks, instead of every
// block read-modify-writing all 1024 lanes in memory.
template <class F>
SPECDEC_ROW_BODY double chunk_sum_of(F f, std::int64_t m) {
  constexpr int kL = bitexact::kSumLanes;
  double lane[kL];
  const std::int64_t full = m - m % kL;
  for (int l0 = 0; l0 < kL; l0 += 16) {
    double acc[16] = {};
    for (std::int64_t j = 0; j < full; j += kL)
      for (int l = 0; l < 16; ++l) acc[l] += f(j + l0 + l);
    for (int l = 0; l < 16; ++l) lane[l0 + l] = acc[l];
  }
  for (std::int64_t l = 0; l < m - full; ++l) lane[l] += f(full + l);
  double warp[32];
  for (int w = 0; w < 32; ++w) {
    bitexact::pair_off_32(lane + 32 * w);
    warp[w] = lane[32 * w];
  }
  bitexact::pair_off_32(warp);
  return warp[0];
}
SPECDEC_ROW_BODY double chunk_sum(const float* x, std::int64_t m) {
  return chunk_sum_of([x](std::int64_t i) { return static_cast<double>(x[i]); }, m);
}

// max(0, d) for a finite d, as std::max(0.0, d) gives it (+0 for d <= 0),
// by an integer test of its bits, which vectorizes (a float compare stays a
// branch under -ftrapping-math).
SPECDEC_ROW_BODY double positive_part(double d) { return std::bit_cast<std::int64_t>(d) > 0 ? d : 0.0; }

// bitexact::lane_sum of floats: the chunks' sums in order, from 0.0.
SPECDEC_ROW_BODY double lane_sum(const float* x, std::int64_t n) {
  double total = 0.0;
  for (std::int64_t c = 0; c < n; c += bitexact::kSumChunk)
    total += chunk_sum(x + c, n - c < bitexact::kSumChunk ? n - c : bitexact::kSumChunk);
  return total;
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
  return chunk_sum(e, p.n);
}

SPECDEC_ROW_BODY void scale(float* e, std::int64_t n, float f) {
  for (std::int64_t i = 0; i < n; ++i) e[i] *= f;
}

// The fixed-point mass of x[0..n) (bitexact::fixed_mass each, summed as
// integers: exact in any order).
template <class T>
SPECDEC_ROW_BODY std::uint64_t mass_total(const T* x, std::int64_t n) {
  std::uint64_t lane[8] = {};
  const std::int64_t full = n - n % 8;
  for (std::int64_t i = 0; i < full; i += 8)
    for (int j = 0; j < 8; ++j) lane[j] += bitexact::fixed_mass(static_cast<double>(x[i + j]));
  std::uint64_t total = 0;
  for (std::int64_t i = full; i < n; ++i) total += bitexact::fixed_mass(static_cast<double>(x[i]));
  for (const auto v : lane) total += v;
  return total;
}

// The smallest i whose running mass (x[excluded] weighing 0) exceeds t, -1
// if none: whole blocks of 64 are summed at once (exact, so the same running
// sums as one by one) and only the block where the mass crosses t is walked.
template <class T>
SPECDEC_ROW_BODY std::int64_t first_crossing(const T* x, std::int64_t n, std::uint64_t t, std::int64_t excluded) {
  constexpr std::int64_t kBlock = 64;
  std::uint64_t acc = 0;
  std::int64_t b = 0;
  for (; b + kBlock <= n; b += kBlock) {
    std::uint64_t s = 0;
    for (std::int64_t i = 0; i < kBlock; ++i) s += bitexact::fixed_mass(static_cast<double>(x[b + i]));
    if (excluded >= b && excluded < b + kBlock) s -= bitexact::fixed_mass(static_cast<double>(x[excluded]));
    if (acc + s > t) break;
    acc += s;
  }
  for (std::int64_t i = b; i < n; ++i) {
    if (i == excluded) continue;
    acc += bitexact::fixed_mass(static_cast<double>(x[i]));
    if (acc > t) return i;
  }
  return -1;
}

// The end of check_distribution's pass: the tail after the full blocks of
// eight, then the lanes in order (both variants end this way). bad: NaN or
// infinite seen; low: a negative value seen.
SPECDEC_ROW_BODY DistributionScan finish_distribution_scan(const float* row, std::int64_t n, std::int64_t full,
                                                           double* sum, bool bad, bool low) {
  for (std::int64_t i = full; i < n; ++i) {
    const auto u = std::bit_cast<std::uint32_t>(row[i]);
    sum[0] += static_cast<double>(row[i]);
    bad |= (u & 0x7f800000u) == 0x7f800000u;
    low |= u > 0x80000000u;
  }
  DistributionScan out;
  for (int l = 0; l < 8; ++l) out.sum += sum[l];
  out.finite = !bad;
  out.negative = low;
  return out;
}

// check_distribution's pass (core/distribution.hpp): eight double sums,
// lane l adding values l, l + 8, ... in order, and whether any value is NaN,
// infinite or negative. A float is NaN or infinite when its exponent bits are
// all ones, and below zero (-0 is not) when its bits, unsigned, exceed the
// sign bit's: integer tests, which vectorize where float compares would not
// (-ftrapping-math).
SPECDEC_ROW_BODY DistributionScan distribution_scan(const float* row, std::int64_t n) {
  double sum[8] = {};
  std::uint32_t bad = 0, low = 0;
  const std::int64_t full = n - n % 8;
  for (std::int64_t i = 0; i < full; i += 8)
    for (int l = 0; l < 8; ++l) {
      const auto u = std::bit_cast<std::uint32_t>(row[i + l]);
      sum[l] += static_cast<double>(row[i + l]);
      bad |= (u & 0x7f800000u) == 0x7f800000u;
      low |= u > 0x80000000u;
    }
  return finish_distribution_scan(row, n, full, sum, bad != 0, low != 0);
}

// Recursive rejection sampling's residual step (accept/
// recursive_rejection_sampling.hpp), on double rows r and q: the mass of
// max(0, r - q) in lane_sum's shape, then r <- max(0, r - q) / mass; and q
// <- q / total. Divisions, not reciprocals: the CUDA kernel divides too.
SPECDEC_ROW_BODY double residual_mass(const double* r, const double* q, std::int64_t n) {
  double total = 0.0;
  for (std::int64_t c = 0; c < n; c += bitexact::kSumChunk)
    total += chunk_sum_of([r, q, c](std::int64_t i) { return positive_part(r[c + i] - q[c + i]); },
                          n - c < bitexact::kSumChunk ? n - c : bitexact::kSumChunk);
  return total;
}
SPECDEC_ROW_BODY void subtract_residual(double* r, const double* q, std::int64_t n, double mass) {
  for (std::int64_t i = 0; i < n; ++i) r[i] = positive_part(r[i] - q[i]) / mass;
}
SPECDEC_ROW_BODY void divide(double* q, std::int64_t n, double total) {
  for (std::int64_t i = 0; i < n; ++i) q[i] /= total;
}

}  // namespace body

// The baseline variants.
namespace baseline {
inline MaxScan max_scan(const float* x, std::int64_t n) { return body::max_scan(x, n); }
inline std::int64_t first_equal(const float* x, std::int64_t n, float m) { return body::first_equal(x, n, m); }
inline double exp_pass(const ExpPass& p) { return body::exp_pass(p); }
inline void scale(float* e, std::int64_t n, float f) { body::scale(e, n, f); }
inline std::uint64_t mass_total(const float* x, std::int64_t n) { return body::mass_total(x, n); }
inline std::uint64_t mass_total(const double* x, std::int64_t n) { return body::mass_total(x, n); }
inline std::int64_t first_crossing(const float* x, std::int64_t n, std::uint64_t t, std::int64_t excluded) {
  return body::first_crossing(x, n, t, excluded);
}
inline std::int64_t first_crossing(const double* x, std::int64_t n, std::uint64_t t, std::int64_t excluded) {
  return body::first_crossing(x, n, t, excluded);
}
inline double residual_mass(const double* r, const double* q, std::int64_t n) { return body::residual_mass(r, q, n); }
inline void subtract_residual(double* r, const double* q, std::int64_t n, double mass) {
  body::subtract_residual(r, q, n, mass);
}
inline void divide(double* q, std::int64_t n, double total) { body::divide(q, n, total); }
inline double lane_sum(const float* x, std::int64_t n) { return body::lane_sum(x, n); }
inline DistributionScan distribution_scan(const float* x, std::int64_t n) { return body::distribution_scan(x, n); }
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
SPECDEC_AVX512_FN inline std::uint64_t mass_total(const float* x, std::int64_t n) { return body::mass_total(x, n); }
SPECDEC_AVX512_FN inline std::uint64_t mass_total(const double* x, std::int64_t n) { return body::mass_total(x, n); }
SPECDEC_AVX512_FN inline std::int64_t first_crossing(const float* x, std::int64_t n, std::uint64_t t,
                                                     std::int64_t excluded) {
  return body::first_crossing(x, n, t, excluded);
}
SPECDEC_AVX512_FN inline std::int64_t first_crossing(const double* x, std::int64_t n, std::uint64_t t,
                                                     std::int64_t excluded) {
  return body::first_crossing(x, n, t, excluded);
}
SPECDEC_AVX512_FN inline double residual_mass(const double* r, const double* q, std::int64_t n) {
  return body::residual_mass(r, q, n);
}
SPECDEC_AVX512_FN inline void subtract_residual(double* r, const double* q, std::int64_t n, double mass) {
  body::subtract_residual(r, q, n, mass);
}
SPECDEC_AVX512_FN inline void divide(double* q, std::int64_t n, double total) { body::divide(q, n, total); }
SPECDEC_AVX512_FN inline double lane_sum(const float* x, std::int64_t n) { return body::lane_sum(x, n); }
// With intrinsics (GCC does not vectorize the mixed float and double lanes
// at this width): two blocks of eight per load, in order.
SPECDEC_AVX512_FN inline DistributionScan distribution_scan(const float* row, std::int64_t n) {
  // The masked conversion with a zero source, and no 512-to-256 casts: GCC
  // 12 warns on the plain forms (their undefined source).
  const __m512d zero = _mm512_setzero_pd();
  __m512d sum = zero;
  __mmask16 bad = 0, low = 0;
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const std::int64_t full = n - n % 8, pairs = full - full % 16;
  for (std::int64_t i = 0; i < pairs; i += 16) {
    const __m512i u = _mm512_loadu_si512(row + i);
    sum = _mm512_add_pd(sum, _mm512_mask_cvtps_pd(zero, 0xff, _mm256_loadu_ps(row + i)));
    sum = _mm512_add_pd(sum, _mm512_mask_cvtps_pd(zero, 0xff, _mm256_loadu_ps(row + i + 8)));
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, exponent), exponent);
    low |= _mm512_cmpgt_epu32_mask(u, sign);
  }
  if (pairs < full) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + pairs));
    sum = _mm512_add_pd(sum, _mm512_mask_cvtps_pd(zero, 0xff, _mm256_castsi256_ps(u)));
    const __m256i exponent8 = _mm256_set1_epi32(0x7f800000), sign8 = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    bad |= _mm256_cmpeq_epi32_mask(_mm256_and_si256(u, exponent8), exponent8);
    low |= _mm256_cmpgt_epu32_mask(u, sign8);
  }
  double lanes[8];
  _mm512_storeu_pd(lanes, sum);
  return body::finish_distribution_scan(row, n, full, lanes, bad != 0, low != 0);
}
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
template <class T>
std::uint64_t mass_total(const T* x, std::int64_t n) {
  return SPECDEC_ROW_DISPATCH(mass_total, x, n);
}
template <class T>
std::int64_t first_crossing(const T* x, std::int64_t n, std::uint64_t t, std::int64_t excluded) {
  return SPECDEC_ROW_DISPATCH(first_crossing, x, n, t, excluded);
}
inline double residual_mass(const double* r, const double* q, std::int64_t n) {
  return SPECDEC_ROW_DISPATCH(residual_mass, r, q, n);
}
inline void subtract_residual(double* r, const double* q, std::int64_t n, double mass) {
  SPECDEC_ROW_DISPATCH(subtract_residual, r, q, n, mass);
}
inline void divide(double* q, std::int64_t n, double total) { SPECDEC_ROW_DISPATCH(divide, q, n, total); }
inline double lane_sum(const float* x, std::int64_t n) { return SPECDEC_ROW_DISPATCH(lane_sum, x, n); }
inline DistributionScan distribution_scan(const float* x, std::int64_t n) {
  return SPECDEC_ROW_DISPATCH(distribution_scan, x, n);
}
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
