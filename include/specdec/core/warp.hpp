// Logit warping: temperature, top-k, top-p, in that order (the Hugging Face
// order), turning one row of logits into the distribution a rule samples from.
// Target and draft rows go through the same function, so both sides of every
// acceptance test are warped identically: the rules are exact for the warped
// distributions (Leviathan et al., arXiv 2211.17192, §2.2).
//
// Semantics, including ties and edges:
//  - temperature 0: one-hot at the argmax; ties go to the lowest token id.
//  - top_k = 0 or top_k >= vocab: off. Otherwise every token whose logit is
//    >= the k-th largest logit survives, so ties at the boundary are all kept
//    (the result may hold more than k tokens, never fewer).
//  - top_p = 1: off. Otherwise, over the survivors of top-k, the smallest set
//    of most probable tokens whose mass reaches top_p survives, together with
//    every token whose probability equals the last one admitted (ties kept).
//  - -inf logits are masked tokens (probability 0); NaN or +inf is an error, as
//    is a row with no finite logit.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// Index of the largest value; ties go to the lowest index. -inf entries are
// never preferred over finite ones; an all -inf row returns 0.
inline TokenId argmax(std::span<const float> row) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < row.size(); ++i)
    if (row[i] > row[best]) best = i;
  return static_cast<TokenId>(best);
}

// e^x for x <= 0 (softmax exponents after the max is subtracted; -inf gives
// 0), Cephes' expf polynomial (about 1.3 ulp over [-87, 0], checked in
// warp_test) written without calls, branches or float comparisons so the
// softmax loop vectorizes (glibc's expf does not; GCC will not if-convert
// float compares under its default -ftrapping-math). Below -87.3 (e^x <
// FLT_MIN) it returns 0. For x <= 0, x < -87.3 exactly when x's bits, read as
// an unsigned integer, exceed those of -87.3.
inline float exp_nonpositive(float x) {
  constexpr float kMin = -87.33654f;
  constexpr std::uint32_t kMinBits = std::bit_cast<std::uint32_t>(kMin);
  const std::uint32_t under = 0u - static_cast<std::uint32_t>(std::bit_cast<std::uint32_t>(x) > kMinBits);  // all ones if below
  const float xc = std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) & ~under) | (kMinBits & under));
  const float t = xc * 1.44269504088896341f + 12582912.0f;  // round(x / ln 2) in t's low mantissa bits
  const float n = t - 12582912.0f;
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln2, in two parts
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const std::uint32_t exponent = (std::bit_cast<std::uint32_t>(t) - 0x4B400000u + 127u) << 23;
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(y * std::bit_cast<float>(exponent)) & ~under);
}

// Reusable warping workspace: holds the scratch buffers so a decoder that warps
// a row per tree node allocates once, not per row.
class Warper {
 public:
  // Writes the warped distribution of `logits` into `probs` (same size).
  void operator()(std::span<const float> logits, const SamplingParams& params,
                  std::span<float> probs) {
    params.validate();
    const float max_logit = scan_logits(logits);
    if (probs.size() != logits.size())
      throw ShapeError(fmt::format("warp: output has {} entries, logits have {}", probs.size(),
                                   logits.size()));
    const std::size_t vocab = logits.size();
    if (params.is_greedy()) {
      std::fill(probs.begin(), probs.end(), 0.0f);
      probs[static_cast<std::size_t>(argmax(logits))] = 1.0f;
      return;
    }

    // top-k: the k-th largest logit is the admission threshold.
    float threshold = -std::numeric_limits<float>::infinity();
    if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab) {
      values_.assign(logits.begin(), logits.end());
      const auto kth = values_.begin() + (params.top_k - 1);
      std::nth_element(values_.begin(), kth, values_.end(), std::greater<float>());
      threshold = *kth;
    }

    // Softmax at temperature T over the survivors: max subtracted, exponent
    // by exp_nonpositive (vectorizes), sum in double over four lanes.
    const float inv_t = 1.0f / params.temperature;
    for (std::size_t i = 0; i < vocab; ++i) probs[i] = exp_nonpositive((logits[i] - max_logit) * inv_t);
    if (threshold > -std::numeric_limits<float>::infinity())  // top-k: drop what is below the k-th logit
      for (std::size_t i = 0; i < vocab; ++i)
        if (logits[i] < threshold) probs[i] = 0.0f;
    double lane[4] = {0.0, 0.0, 0.0, 0.0};
    std::size_t i = 0;
    for (; i + 4 <= vocab; i += 4)
      for (std::size_t j = 0; j < 4; ++j) lane[j] += probs[i + j];
    for (; i < vocab; ++i) lane[0] += probs[i];
    normalize(probs, (lane[0] + lane[1]) + (lane[2] + lane[3]));
    if (params.top_p < 1.0f) apply_top_p(probs, params.top_p);
  }

 private:
  // One branch-free pass (it vectorizes): the largest logit, and whether any
  // logit is NaN or +inf, in which case check_logits names it.
  static float scan_logits(std::span<const float> logits) {
    if (logits.empty()) throw InvalidDistributionError("warp: empty logit row");
    constexpr float kInf = std::numeric_limits<float>::infinity();
    float lane[8] = {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
    int bad = 0;  // NaN and +inf fail v < inf
    const std::size_t n = logits.size();
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (std::size_t j = 0; j < 8; ++j) {
        const float v = logits[i + j];
        bad += !(v < kInf);
        lane[j] = v > lane[j] ? v : lane[j];
      }
    for (; i < n; ++i) {
      bad += !(logits[i] < kInf);
      lane[0] = logits[i] > lane[0] ? logits[i] : lane[0];
    }
    if (bad) check_logits(logits);
    float m = lane[0];
    for (const float v : lane) m = v > m ? v : m;
    if (m == -std::numeric_limits<float>::infinity()) throw InvalidDistributionError("warp: every logit is -inf");
    return m;
  }

  static void check_logits(std::span<const float> logits) {
    if (logits.empty()) throw InvalidDistributionError("warp: empty logit row");
    bool any_finite = false;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      const float v = logits[i];
      if (std::isnan(v) || v == std::numeric_limits<float>::infinity())
        throw InvalidDistributionError(
            fmt::format("warp: logit of token {} is {} (NaN and +inf are not logits)", i, v));
      any_finite |= std::isfinite(v);
    }
    if (!any_finite) throw InvalidDistributionError("warp: every logit is -inf");
  }

  static void normalize(std::span<float> probs, double sum) {
    const float inv = static_cast<float>(1.0 / sum);
    for (float& p : probs) p *= inv;
  }

  // Nucleus: sort candidates by (probability desc, id asc) only as far as
  // needed — the nucleus is usually small, so grow a partial sort by doubling.
  void apply_top_p(std::span<float> probs, float top_p) {
    order_.clear();
    for (std::size_t i = 0; i < probs.size(); ++i)
      if (probs[i] > 0.0f) order_.push_back(static_cast<TokenId>(i));
    const auto by_prob = [&](TokenId a, TokenId b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    };
    std::size_t sorted = 0;
    double mass = 0.0;
    std::size_t cut = 0;  // number of admitted tokens, once the mass reaches top_p
    for (std::size_t want = 64; cut == 0 && sorted < order_.size(); want *= 2) {
      const std::size_t upto = std::min(want, order_.size());
      std::partial_sort(order_.begin() + static_cast<std::ptrdiff_t>(sorted),
                        order_.begin() + static_cast<std::ptrdiff_t>(upto), order_.end(), by_prob);
      for (; sorted < upto && cut == 0; ++sorted) {
        mass += probs[order_[sorted]];
        if (mass >= top_p) cut = sorted + 1;
      }
    }
    if (cut == 0 || cut == order_.size()) return;  // everything is admitted
    const float last = probs[order_[cut - 1]];
    double kept = 0.0;
    for (float& p : probs) {
      if (p < last) p = 0.0f;  // ties with the last admitted token stay
      kept += p;
    }
    normalize(probs, kept);
  }

  std::vector<float> values_;
  std::vector<TokenId> order_;
};

// One-shot convenience; prefer a long-lived Warper in loops.
inline void warp(std::span<const float> logits, const SamplingParams& params,
                 std::span<float> probs) {
  Warper w;
  w(logits, params, probs);
}

}  // namespace specdec
