// The arithmetic that host code and the CUDA kernels in cuda/ share, so that
// both produce the same probability rows and draw the same tokens, bit for
// bit: the softmax exponential, a row's sum, fixed-point masses, and the float
// ordering the top-k selection uses.
//
// Bit-identical results need the same operations in the same order with the
// same roundings: the exponential's float adds and multiplies are written
// explicitly rounded on the device (nvcc would otherwise fuse them into FMAs),
// and a row's sum has a fixed shape (lane_sum) that a CUDA block reproduces.
#pragma once

#include <bit>
#include <cstdint>

#include "specdec/core/macros.hpp"

namespace specdec::bitexact {

// a * b and a + b rounded once each (no fused multiply-add), on host and
// device, for float and double.
template <class T>
SPECDEC_HOST_DEVICE T mul_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float))
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
template <class T>
SPECDEC_HOST_DEVICE T add_rn(T a, T b) {
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == sizeof(float))
    return __fadd_rn(a, b);
  else
    return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// e^x for x <= 0 (softmax exponents after the max is subtracted; -inf gives
// 0), Cephes' expf polynomial (about 1.3 ulp over [-87, 0], checked in
// warp_test) written without calls, branches or float comparisons so the
// host softmax loop vectorizes (glibc's expf does not; GCC will not
// if-convert float compares under its default -ftrapping-math). Below -87.3
// (e^x < FLT_MIN) it returns 0. For x <= 0, x < -87.3 exactly when x's bits,
// read as an unsigned integer, exceed those of -87.3.
SPECDEC_HOST_DEVICE float exp_nonpositive(float x) {
  constexpr float kMin = -87.33654f;
  constexpr std::uint32_t kMinBits = std::bit_cast<std::uint32_t>(kMin);
  const std::uint32_t under =
      0u - static_cast<std::uint32_t>(std::bit_cast<std::uint32_t>(x) > kMinBits);  // all ones if below
  const float xc = std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) & ~under) | (kMinBits & under));
  const float t =
      add_rn(mul_rn(xc, 1.44269504088896341f), 12582912.0f);  // round(x / ln 2) in t's low mantissa bits
  const float n = add_rn(t, -12582912.0f);
  const float r =
      add_rn(add_rn(xc, -mul_rn(n, 0.693359375f)), mul_rn(n, 2.12194440e-4f));  // x - n ln2, in two parts
  float y = 1.9875691500e-4f;
  y = add_rn(mul_rn(y, r), 1.3981999507e-3f);
  y = add_rn(mul_rn(y, r), 8.3334519073e-3f);
  y = add_rn(mul_rn(y, r), 4.1665795894e-2f);
  y = add_rn(mul_rn(y, r), 1.6666665459e-1f);
  y = add_rn(mul_rn(y, r), 5.0000001201e-1f);
  y = add_rn(add_rn(mul_rn(y, mul_rn(r, r)), r), 1.0f);
  const std::uint32_t exponent = (std::bit_cast<std::uint32_t>(t) - 0x4B400000u + 127u) << 23;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(mul_rn(y, std::bit_cast<float>(exponent))) &
                              ~under);
}

// A softmax exponent: e^((logit - max) / T) as exp_nonpositive((logit - max) * (1 / T)).
SPECDEC_HOST_DEVICE float softmax_exponent(float logit, float max_logit, float inv_temperature) {
  return exp_nonpositive(mul_rn(add_rn(logit, -max_logit), inv_temperature));
}

// A float as an unsigned key that orders like the float (sign flipped;
// negatives reversed): radix selections over logits compare these.
SPECDEC_HOST_DEVICE std::uint32_t ordered_key(float v) {
  const auto bits = std::bit_cast<std::uint32_t>(v);
  return bits ^ ((bits >> 31) != 0 ? 0xffffffffu : 0x80000000u);
}

// ln x for a finite x > 0, the same bits on host and device (std::log and
// CUDA's log may differ in the last bit). x = m 2^e with m in [sqrt(1/2),
// sqrt(2)); ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its
// series to s^23 (truncation below 1e-18); e ln 2 in two parts. Within a few
// ulps of the true value; subnormal x are scaled up first.
SPECDEC_HOST_DEVICE double log_positive(double x) {
  int e = 0;
  if (x < 0x1p-1022) {  // subnormal: scale into the normal range
    x = mul_rn(x, 0x1p54);
    e = -54;
  }
  std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
  e += static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
  double m = std::bit_cast<double>(bits);
  if (m > 1.4142135623730951) {
    m = mul_rn(m, 0.5);
    ++e;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double z = mul_rn(s, s);
  // 2 (s + s^3/3 + ... + s^23/23), Horner in z from the highest term.
  double poly = 2.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) poly = add_rn(mul_rn(poly, z), 2.0 / k);
  const double ln_m = mul_rn(s, poly);
  constexpr double kLn2Hi = 0x1.62e42fefa3800p-1, kLn2Lo = 0x1.ef35793c76730p-45;  // ln 2 = hi + lo
  const double de = static_cast<double>(e);
  return add_rn(mul_rn(de, kLn2Hi), add_rn(mul_rn(de, kLn2Lo), ln_m));
}

// e^y for a finite y <= 0, the same bits on host and device; 0 below -745.
// y = k ln 2 + r, |r| <= ln 2 / 2; e^r by its Taylor series to r^14
// (truncation below 1e-17); times 2^k through the exponent bits.
SPECDEC_HOST_DEVICE double exp_nonpositive_double(double y) {
  if (y < -745.0) return 0.0;
  constexpr double kLn2Hi = 0x1.62e42fefa3800p-1, kLn2Lo = 0x1.ef35793c76730p-45;
  const double k = static_cast<double>(static_cast<long long>(
      add_rn(mul_rn(y, 1.4426950408889634), y < 0.0 ? -0.5 : 0.5)));  // round(y / ln 2)
  const double r = add_rn(add_rn(y, -mul_rn(k, kLn2Hi)), -mul_rn(k, kLn2Lo));
  double sum = 1.0;  // Horner: 1 + r (1 + r/2 (1 + r/3 (...)))
  for (int n = 14; n >= 1; --n) sum = add_rn(1.0, mul_rn(mul_rn(r, sum), 1.0 / n));
  // 2^k, in two steps when it would be subnormal.
  const int ki = static_cast<int>(k);
  if (ki >= -1022) return mul_rn(sum, std::bit_cast<double>(static_cast<std::uint64_t>(ki + 1023) << 52));
  return mul_rn(mul_rn(sum, std::bit_cast<double>(static_cast<std::uint64_t>(ki + 1023 + 64) << 52)), 0x1p-64);
}

// A probability mass in fixed point: floor(w * 2^60), 0 for w <= 0, NaN or
// infinite.
// Integer sums of these are exact in any order, so a parallel sum equals a
// sequential one: draws (row_math::sample_weights) and the top-p nucleus sum
// masses this way. 2^-60 is finer than a uniform's 2^-53 steps. Masses are
// probabilities (each below 8, a row's total below 16).
inline constexpr int kMassFractionBits = 60;
SPECDEC_HOST_DEVICE std::uint64_t fixed_mass(double w) {
  // Through int64: w * 2^60 < 2^63, and a signed conversion is one
  // instruction where an unsigned one is a branchy sequence on x86-64.
  // w > 0 and finite, as an unsigned compare of its bits: an integer select,
  // not a float compare GCC keeps as a branch (-ftrapping-math), so scans
  // of masses vectorize.
  const double c = std::bit_cast<std::uint64_t>(w) - 1 < 0x7fefffffffffffffull ? w : 0.0;
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(c * 0x1p60));
}

// A row's sum in double, with a fixed shape that a CUDA block reproduces:
//  - The row is cut into chunks of kSumChunk = 8192 values. In a chunk, lane
//    l in [0, 1024) adds the chunk's values l, l + 1024, ..., l + 7168 in that
//    order, from 0.0.
//  - The lanes form 32 warps of 32 (lane l = 32 w + k). In each warp, lane k
//    += lane k + s for s = 16, 8, 4, 2, 1; then the 32 warp sums pair off the
//    same way, giving the chunk's sum.
//  - The chunks' sums are added in order, from 0.0.
// A CUDA block of 1024 threads gives thread l lane l and pairs with warp
// shuffles, so its sum is the host's to the last bit; on the host the lanes
// vectorize.
inline constexpr int kSumLanes = 1024;
inline constexpr std::int64_t kSumChunk = 8 * kSumLanes;

// The 32-way pairwise sum above, in place: v[0] += v[16], ... ends with the sum in v[0].
SPECDEC_HOST_DEVICE void pair_off_32(double* v) {
  for (int s = 16; s >= 1; s /= 2)
    for (int k = 0; k < s; ++k) v[k] += v[k + s];
}

// One chunk's sum in lane_sum's shape: the values f(c), ..., f(c + m - 1),
// m <= kSumChunk.
template <class F>
SPECDEC_HOST_DEVICE double chunk_sum_of(F f, std::int64_t c, std::int64_t m) {
  double lane[kSumLanes] = {};
  std::int64_t j = 0;
  for (; j + kSumLanes <= m; j += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) lane[l] += f(c + j + l);
  for (int l = 0; j + l < m; ++l) lane[l] += f(c + j + l);
  double warp[32];
  for (int w = 0; w < 32; ++w) {
    pair_off_32(lane + 32 * w);
    warp[w] = lane[32 * w];
  }
  pair_off_32(warp);
  return warp[0];
}

// lane_sum of the values f(0..n) (doubles).
template <class F>
SPECDEC_HOST_DEVICE double lane_sum_of(F f, std::int64_t n) {
  double total = 0.0;
  for (std::int64_t c = 0; c < n; c += kSumChunk) total += chunk_sum_of(f, c, n - c < kSumChunk ? n - c : kSumChunk);
  return total;
}

template <class T>
SPECDEC_HOST_DEVICE double lane_sum(const T* x, std::int64_t n) {
  return lane_sum_of([x](std::int64_t i) { return static_cast<double>(x[i]); }, n);
}

// The softmax of a row, chunk by chunk, so that CUDA blocks that each hold one
// chunk of a row compute the host's probabilities bit for bit without first
// agreeing on the row's largest logit: the online normaliser of Milakov and
// Gimelshein (arXiv 1805.02867, Algorithm 3) with a fixed shape. At inverse
// temperature 1/T, over lane_sum's chunks of kSumChunk values:
//  - m_c is chunk c's largest logit, e_i = softmax_exponent(l_i, m_c, 1/T)
//    (0 for a token the warp excludes), s_c the chunk's sum of the e_i in
//    lane_sum's shape (chunk_sum_of);
//  - with M the row's largest logit, scale_c = softmax_chunk_scale(m_c, M,
//    1/T) and Z = sum over c in order, from 0.0, of s_c * scale_c, each
//    product and sum rounded once (softmax_normaliser_add);
//  - p_i = e_i * f_c, f_c = softmax_chunk_factor(scale_c, Z).
// A chunk without a finite logit has e_i = 0 and scale_c = 0. Z >= 1: the
// chunk holding M contributes its e = 1 at scale 1.
SPECDEC_HOST_DEVICE float softmax_chunk_scale(float chunk_max, float row_max, float inv_temperature) {
  return std::bit_cast<std::uint32_t>(chunk_max) == 0xff800000u  // -inf
             ? 0.0f
             : softmax_exponent(chunk_max, row_max, inv_temperature);
}
SPECDEC_HOST_DEVICE double softmax_normaliser_add(double z, double chunk_sum, float chunk_scale) {
  return add_rn(z, mul_rn(chunk_sum, static_cast<double>(chunk_scale)));
}
SPECDEC_HOST_DEVICE float softmax_chunk_factor(float chunk_scale, double normaliser) {
  return static_cast<float>(static_cast<double>(chunk_scale) / normaliser);
}

}  // namespace specdec::bitexact
