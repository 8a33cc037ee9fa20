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
    if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab)
      threshold = kth_largest(logits, static_cast<std::size_t>(params.top_k));

    // Softmax at temperature T over the survivors: max subtracted, exponent
    // by exp_nonpositive (vectorizes), sum in double over four lanes.
    const float inv_t = 1.0f / params.temperature;
    if (threshold > -std::numeric_limits<float>::infinity()) {  // top-k: nothing below the k-th logit
      for (std::size_t i = 0; i < vocab; ++i)
        probs[i] = logits[i] < threshold ? 0.0f : exp_nonpositive((logits[i] - max_logit) * inv_t);
    } else {
      for (std::size_t i = 0; i < vocab; ++i) probs[i] = exp_nonpositive((logits[i] - max_logit) * inv_t);
    }
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

  // Radix buckets of a float: its top 11 bits, as an unsigned key that
  // orders like the float (sign flipped; negatives reversed).
  static constexpr int kBucketShift = 21;
  static constexpr std::size_t kBuckets = std::size_t{1} << (32 - kBucketShift);
  static std::uint32_t ordered_key(float v) {
    const auto bits = std::bit_cast<std::uint32_t>(v);
    return bits ^ ((bits >> 31) != 0 ? 0xffffffffu : 0x80000000u);
  }

  // The k-th largest of `values` (1 <= k < size), without sorting them all:
  // a histogram of the top 11 bits finds the bucket holding it, and only
  // that bucket's values are selected among. Exactly std::nth_element's
  // value.
  float kth_largest(std::span<const float> values, std::size_t k) {
    // Four interleaved histograms, so that runs of one bucket do not wait
    // on each other's increments; then summed.
    counts_.assign(4 * kBuckets, 0);
    const std::size_t n = values.size();
    std::size_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (std::size_t j = 0; j < 4; ++j) ++counts_[j * kBuckets + (ordered_key(values[i + j]) >> kBucketShift)];
    for (; i < n; ++i) ++counts_[ordered_key(values[i]) >> kBucketShift];
    for (std::size_t b = 0; b < kBuckets; ++b)
      counts_[b] += counts_[kBuckets + b] + counts_[2 * kBuckets + b] + counts_[3 * kBuckets + b];
    std::size_t above = 0, bucket = kBuckets;
    while (bucket > 0 && above + counts_[bucket - 1] < k) above += counts_[--bucket];
    --bucket;  // the bucket holding the k-th largest
    values_.clear();
    for (const float v : values)
      if ((ordered_key(v) >> kBucketShift) == bucket) values_.push_back(v);
    const auto kth = values_.begin() + static_cast<std::ptrdiff_t>(k - above - 1);
    std::nth_element(values_.begin(), kth, values_.end(), std::greater<float>());
    return *kth;
  }

  // Nucleus: admit tokens by (probability desc, id asc) until the mass,
  // summed in that order in double, reaches top_p; then keep every token at
  // least as probable as the last one admitted.
  //
  // Without sorting the vocabulary: a histogram of the probabilities' top
  // bits gives each bucket's mass, and the scan from the top finds the
  // bucket where the mass reaches top_p. Floats of at least 2^-29 are
  // multiples of 2^-52, so any sum of them up to 1 is exact in double, in
  // any order: when that bucket lies above 2^-29, the mass above it is
  // exact, and only its own tokens are sorted. The result is bit for bit the
  // sum over the whole sorted vocabulary. Otherwise (a nucleus reaching below
  // 2^-29) every positive token is sorted.
  void apply_top_p(std::span<float> probs, float top_p) {
    constexpr std::size_t kLanes = 4;  // interleaved histograms: runs of one bucket do not wait on each other
    constexpr std::size_t kHalf = kBuckets / 2;  // p >= 0: the sign bit is 0, its bucket is bits >> kBucketShift
    bucket_mass_.assign(kLanes * kHalf, 0.0);
    counts_.assign(kLanes * kHalf, 0);
    const auto bucket_of = [](float p) { return std::bit_cast<std::uint32_t>(p) >> kBucketShift; };
    const std::size_t n = probs.size();
    std::size_t i = 0, zeros = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (std::size_t j = 0; j < kLanes; ++j) {
        const float p = probs[i + j];
        bucket_mass_[j * kHalf + bucket_of(p)] += p;
        ++counts_[j * kHalf + bucket_of(p)];
        zeros += std::bit_cast<std::uint32_t>(p) == 0;
      }
    for (; i < n; ++i) {
      bucket_mass_[bucket_of(probs[i])] += probs[i];
      ++counts_[bucket_of(probs[i])];
      zeros += std::bit_cast<std::uint32_t>(probs[i]) == 0;
    }
    for (std::size_t b = 0; b < kHalf; ++b) {
      bucket_mass_[b] += bucket_mass_[kHalf + b] + bucket_mass_[2 * kHalf + b] + bucket_mass_[3 * kHalf + b];
      counts_[b] += counts_[kHalf + b] + counts_[2 * kHalf + b] + counts_[3 * kHalf + b];
    }
    constexpr float kExactFloor = 0x1p-29f;
    const std::size_t floor_bucket = bucket_of(kExactFloor);  // its lowest float is 2^-29 exactly
    std::size_t boundary = kHalf;
    double above = 0.0;  // the mass of the buckets above `boundary`
    while (boundary > floor_bucket && above + bucket_mass_[boundary - 1] < top_p) above += bucket_mass_[--boundary];
    const auto by_prob = [&](TokenId a, TokenId b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    };
    std::size_t positive = n - zeros, cut = 0;  // cut: admitted tokens, once the mass reaches top_p
    float last = 0.0f;
    order_.clear();
    if (boundary > floor_bucket) {  // the mass reaches top_p in bucket boundary - 1, exactly summed
      const std::size_t b = boundary - 1;
      std::size_t higher = 0;
      for (std::size_t h = boundary; h < kHalf; ++h) higher += counts_[h];
      for (std::size_t t = 0; t < n; ++t)
        if (bucket_of(probs[t]) == b) order_.push_back(static_cast<TokenId>(t));
      std::sort(order_.begin(), order_.end(), by_prob);
      double mass = above;
      for (std::size_t k = 0; k < order_.size() && cut == 0; ++k) {
        mass += probs[order_[k]];
        if (mass >= top_p) cut = higher + k + 1, last = probs[order_[k]];
      }
    }
    if (cut == 0) {  // below 2^-29: every positive token, sorted
      order_.clear();
      for (std::size_t t = 0; t < n; ++t)
        if (probs[t] > 0.0f) order_.push_back(static_cast<TokenId>(t));
      std::sort(order_.begin(), order_.end(), by_prob);
      double mass = 0.0;
      for (std::size_t k = 0; k < order_.size() && cut == 0; ++k) {
        mass += probs[order_[k]];
        if (mass >= top_p) cut = k + 1, last = probs[order_[k]];
      }
    }
    if (cut == 0 || cut == positive) return;  // everything is admitted
    // Below the last admitted token: 0 (ties with it stay). Compared as bits
    // (p >= 0 orders like its bits), so the loop vectorizes.
    const auto last_bits = std::bit_cast<std::uint32_t>(last);
    for (float& p : probs) {
      const auto bits = std::bit_cast<std::uint32_t>(p);
      p = std::bit_cast<float>(bits < last_bits ? 0u : bits);
    }
    double kept = 0.0;
    if (last >= kExactFloor) {  // exact in any order: four lanes, not one chain of adds
      double lane[kLanes] = {};
      for (i = 0; i + kLanes <= n; i += kLanes)
        for (std::size_t j = 0; j < kLanes; ++j) lane[j] += probs[i + j];
      for (; i < n; ++i) lane[0] += probs[i];
      kept = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    } else {
      for (const float p : probs) kept += p;
    }
    normalize(probs, kept);
  }

  std::vector<float> values_;
  std::vector<TokenId> order_;
  std::vector<std::uint32_t> counts_;
  std::vector<double> bucket_mass_;
};

// One-shot convenience; prefer a long-lived Warper in loops.
inline void warp(std::span<const float> logits, const SamplingParams& params,
                 std::span<float> probs) {
  Warper w;
  w(logits, params, probs);
}

}  // namespace specdec
