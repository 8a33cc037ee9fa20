// Per-row math of the acceptance rules, shared by the host rules and the CUDA
// kernels in cuda/ (SPECDEC_HOST_DEVICE), so host tests prove what kernels run.
//
// Rows are probability rows used as given (validated by the host callers to
// sum to 1 within kDistributionSumTolerance). Every draw is an inverse-CDF
// lookup of one uniform against the exact fixed-point sum of what is drawn
// from (sample_weights), so a residual is never normalised by a rounded total
// and a parallel kernel draws the same token as a sequential loop.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specdec/core/bitexact.hpp"
#include "specdec/core/macros.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/row_kernels.hpp"
#include "specdec/core/types.hpp"

namespace specdec::row_math {

// ---- draws ------------------------------------------------------------------
//
// Every draw is an inverse-CDF lookup in fixed point: weight w becomes the
// integer W = bitexact::fixed_mass(w) = floor(w * 2^60), the uniform u = U *
// 2^-53 its 53 bits, and the draw is the smallest i with W_0 + ... + W_i > T,
// T = floor(U * total / 2^53). Integer sums are exact in any order, so a CUDA
// block that sums a row in parallel finds the very token a sequential host
// loop finds. 2^-60 is finer than the uniform's own 2^-53 steps, so the law is
// the weights' to within the uniform's resolution. Weights are probability
// masses (validated rows and their residuals); NaN and w <= 0 weigh 0.

// T = floor(U * total / 2^53) for u = U * 2^-53 in [0, 1): always < total.
SPECDEC_HOST_DEVICE std::uint64_t draw_threshold(double u, std::uint64_t total) {
  const auto bits = static_cast<std::uint64_t>(u * 0x1p53);
#if defined(__CUDA_ARCH__)
  const std::uint64_t hi = __umul64hi(bits, total);
#else  // the high word of the 128-bit product, from 32-bit halves
  const std::uint64_t a1 = bits >> 32, a0 = bits & 0xffffffffu, b1 = total >> 32, b0 = total & 0xffffffffu;
  const std::uint64_t mid = a1 * b0 + ((a0 * b0) >> 32);  // cannot overflow
  const std::uint64_t mid2 = a0 * b1 + (mid & 0xffffffffu);
  const std::uint64_t hi = a1 * b1 + (mid >> 32) + (mid2 >> 32);
#endif
  return (hi << 11) | ((bits * total) >> 53);
}

// Draw from the non-negative weights w(0..n) (unnormalised) with uniform u
// in [0, 1). Returns kNoToken when nothing has weight.
template <class W>
SPECDEC_HOST_DEVICE TokenId sample_weights(W w, std::int64_t n, double u) {
  std::uint64_t total = 0;
  for (std::int64_t i = 0; i < n; ++i) total += bitexact::fixed_mass(w(i));
  if (total == 0) return kNoToken;
  const std::uint64_t t = draw_threshold(u, total);
  std::uint64_t acc = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    acc += bitexact::fixed_mass(w(i));
    if (acc > t) return static_cast<TokenId>(i);
  }
  return kNoToken;  // unreachable: t < total
}

// Draw from the weights w[0..n) with uniform u, skipping token `excluded`
// (or none when kNoToken). kNoToken when nothing has weight.
template <class T>
SPECDEC_HOST_DEVICE TokenId sample_row(const T* w, std::int64_t n, double u,
                                       TokenId excluded = kNoToken) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {  // row_kernels' vectorized passes, same draw
    std::uint64_t total = row_kernels::mass_total(w, n);
    if (excluded >= 0 && excluded < n) total -= bitexact::fixed_mass(static_cast<double>(w[excluded]));
    if (total == 0) return kNoToken;
    return static_cast<TokenId>(row_kernels::first_crossing(w, n, draw_threshold(u, total), excluded));
  }
#endif
  return sample_weights(
      [w, excluded](std::int64_t i) { return i == excluded ? 0.0 : static_cast<double>(w[i]); }, n, u);
}

// Draw from norm(max(0, p - q)) (Leviathan et al., arXiv 2211.17192, §2.3:
// the residual after a rejection). When q is null the draft was deterministic,
// q = one-hot at `drafted`, and the residual is p without that token. If the
// residual has no mass (p == q up to rounding, where a rejection cannot happen
// in exact arithmetic) it falls back to p rather than divide by zero.
SPECDEC_HOST_DEVICE TokenId sample_residual(const float* p, const float* q, TokenId drafted,
                                            std::int64_t n, double u) {
  TokenId y = kNoToken;
  if (q == nullptr)
    y = sample_row(p, n, u, drafted);
  else
    y = sample_weights(
        [p, q](std::int64_t i) { return static_cast<double>(p[i]) - static_cast<double>(q[i]); }, n, u);
  return y == kNoToken ? sample_row(p, n, u) : y;
}

// Accept a drafted token with probability min(1, p(x) / q(x)): u * q(x) < p(x)
// for u in [0, 1). With q(x) = 1 (a deterministic draft) this is u < p(x).
SPECDEC_HOST_DEVICE bool accept_draft(float p_x, float q_x, double u) {
  return u * static_cast<double>(q_x) < static_cast<double>(p_x);
}

// Rows laid out `stride` floats apart from `base`: row(i) = base + i * stride.
// A null base means "no draft probabilities" (deterministic drafts).
struct StridedRows {
  const float* base = nullptr;
  std::int64_t stride = 0;
  SPECDEC_HOST_DEVICE const float* operator()(std::int64_t i) const {
    return base == nullptr ? nullptr : base + i * stride;
  }
};

// Chain speculative sampling for one sequence (Leviathan et al., arXiv
// 2211.17192, §2.3, Algorithm 1; Chen et al., arXiv 2302.01318, Algorithm 2).
// Lossless.
//   draft_row(i):   q_i, the draft distribution x_i was drawn from [vocab], or
//                   null when x_i was chosen deterministically (q_i = one-hot)
//   tokens:         x_1..x_gamma                                    [gamma]
//   target_row(i):  p_i, i in [0, gamma]                            [vocab]
//   uniforms[j]:    j < gamma: the acceptance test of x_{j+1};
//                   j = gamma: the final draw (residual or bonus)
//   out:            accepted tokens, then the emitted one, then kNoToken
//                   padding                                         [gamma + 1]
// Returns the number of accepted drafts. Consumes exactly gamma + 1 uniforms
// whatever happens, so a batch row's draws never depend on another row's.
template <class DraftRows, class TargetRows>
SPECDEC_HOST_DEVICE std::int32_t chain_speculative_sampling_row(
    DraftRows draft_row, const TokenId* tokens, TargetRows target_row, std::int32_t gamma,
    std::int64_t vocab, PhiloxUniforms uniforms, TokenId* out) {
  std::int32_t i = 0;
  for (; i < gamma; ++i) {
    const TokenId x = tokens[i];
    const float* q = draft_row(i);
    const float q_x = q == nullptr ? 1.0f : q[x];
    if (!accept_draft(target_row(i)[x], q_x, uniforms[static_cast<std::uint64_t>(i)])) break;
    out[i] = x;
  }
  const double u = uniforms[static_cast<std::uint64_t>(gamma)];
  if (i < gamma)
    out[i] = sample_residual(target_row(i), draft_row(i), tokens[i], vocab, u);
  else
    out[i] = sample_row(target_row(gamma), vocab, u);
  for (std::int32_t j = i + 1; j <= gamma; ++j) out[j] = kNoToken;
  return i;
}

}  // namespace specdec::row_math
