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

#include "specdec/core/bitexact.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/row_kernels.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// Index of the largest value; ties go to the lowest index. -inf entries are
// never preferred over finite ones; an all -inf row returns 0.
// (row_kernels.hpp: two vectorized passes.)
inline TokenId argmax(std::span<const float> row) {
  return row_kernels::argmax(row.data(), static_cast<std::int64_t>(row.size()));
}

// e^x for x <= 0, the exponential the softmax uses (bitexact.hpp).
using bitexact::exp_nonpositive;

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
      // the first token holding the largest logit (scan_logits found it)
      probs[static_cast<std::size_t>(row_kernels::first_equal(logits.data(), static_cast<std::int64_t>(vocab), max_logit))] =
          1.0f;
      return;
    }

    // top-k: the k-th largest logit is the admission threshold.
    float threshold = -std::numeric_limits<float>::infinity();
    if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab)
      threshold = kth_largest(logits, static_cast<std::size_t>(params.top_k));

    // Softmax at temperature T over the survivors, chunk by chunk
    // (bitexact::softmax_chunk_scale: a shape the CUDA kernels reproduce bit
    // for bit with one block per chunk); the exponent by exp_nonpositive, in
    // row_kernels' vectorized passes.
    const float inv_t = 1.0f / params.temperature;
    const auto n = static_cast<std::int64_t>(vocab);
    constexpr std::int64_t kChunk = bitexact::kSumChunk;
    scales_.clear();
    double normaliser = 0.0;
    for (std::int64_t c = 0; c < n; c += kChunk) {
      const std::int64_t m = std::min(kChunk, n - c);
      const float* x = logits.data() + c;
      float* e = probs.data() + c;
      const float chunk_max = n <= kChunk ? max_logit : row_kernels::max_scan(x, m).max;
      double sum = 0.0;
      if (chunk_max == -std::numeric_limits<float>::infinity())
        std::fill(e, e + m, 0.0f);
      else  // top-k: nothing below the k-th logit
        sum = row_kernels::exp_pass(row_kernels::ExpPass{x, m, chunk_max, inv_t, threshold, e});
      scales_.push_back(bitexact::softmax_chunk_scale(chunk_max, max_logit, inv_t));
      normaliser = bitexact::softmax_normaliser_add(normaliser, sum, scales_.back());
    }
    for (std::int64_t c = 0; c < n; c += kChunk) {
      const float f = bitexact::softmax_chunk_factor(scales_[static_cast<std::size_t>(c / kChunk)], normaliser);
      row_kernels::scale(probs.data() + c, std::min(kChunk, n - c), f);
    }
    if (params.top_p < 1.0f) apply_top_p(probs, params.top_p);
  }

 private:
  // One branch-free pass (it vectorizes): the largest logit, and whether any
  // logit is NaN or +inf, in which case check_logits names it.
  static float scan_logits(std::span<const float> logits) {
    if (logits.empty()) throw InvalidDistributionError("warp: empty logit row");
    const auto scan = row_kernels::max_scan(logits.data(), static_cast<std::int64_t>(logits.size()));
    if (scan.bad) check_logits(logits);
    if (scan.max == -std::numeric_limits<float>::infinity()) throw InvalidDistributionError("warp: every logit is -inf");
    return scan.max;
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

  // Radix buckets of a float: the top 11 bits of its ordered key.
  static constexpr int kBucketShift = 21;
  static constexpr std::size_t kBuckets = std::size_t{1} << (32 - kBucketShift);
  static std::uint32_t ordered_key(float v) { return bitexact::ordered_key(v); }

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

  // Nucleus: admit tokens by (probability desc, id asc) until their mass
  // reaches top_p; then keep every token at least as probable as the last
  // one admitted. Masses are summed in fixed point (bitexact::fixed_mass),
  // exact in any order, so the result depends on no summation order and the
  // CUDA warp finds the same nucleus. (For probabilities of at least 2^-29
  // it is also the exact double sum in sorted order.) The last token
  // admitted has the largest probability v whose tokens at least as likely
  // as it reach top_p.
  //
  // Without sorting the vocabulary: a histogram of the probabilities' top
  // bits gives each bucket's mass, the scan from the top finds the bucket
  // where the mass reaches top_p, and only its own tokens are sorted.
  void apply_top_p(std::span<float> probs, float top_p) {
    constexpr std::size_t kHalf = kBuckets / 2;  // p >= 0: the sign bit is 0, its bucket is bits >> kBucketShift
    mass_.assign(kHalf, 0);
    const auto bucket_of = [](float p) { return std::bit_cast<std::uint32_t>(p) >> kBucketShift; };
    const std::size_t n = probs.size();
    for (const float p : probs) mass_[bucket_of(p)] += bitexact::fixed_mass(p);
    const std::uint64_t target = bitexact::fixed_mass(top_p);
    std::size_t b = kHalf;
    std::uint64_t above = 0;  // the mass of the buckets above b
    while (b > 0 && above + mass_[b - 1] < target) above += mass_[--b];
    if (b == 0) return;  // the whole row is short of top_p: everything is admitted
    --b;                 // the mass reaches top_p in bucket b
    order_.clear();
    for (std::size_t t = 0; t < n; ++t)
      if (bucket_of(probs[t]) == b) order_.push_back(static_cast<TokenId>(t));
    std::sort(order_.begin(), order_.end(), [&](TokenId x, TokenId y) { return probs[x] > probs[y]; });
    std::uint64_t kept = above;  // then the mass of every token >= last
    float last = 0.0f;
    for (std::size_t k = 0; k < order_.size(); ++k) {
      const float p = probs[order_[k]];
      if (kept >= target && p != last) break;  // past the last admitted value and its ties
      kept += bitexact::fixed_mass(p);
      last = p;
    }
    // Below the last admitted token: 0 (ties with it stay). Compared as bits
    // (p >= 0 orders like its bits), so the loop vectorizes. If that drops
    // nothing, the row is left as it was.
    const auto last_bits = std::bit_cast<std::uint32_t>(last);
    std::size_t dropped = 0;
    for (float& p : probs) {
      const auto bits = std::bit_cast<std::uint32_t>(p);
      dropped += bits != 0 && bits < last_bits;
      p = std::bit_cast<float>(bits < last_bits ? 0u : bits);
    }
    if (dropped > 0) normalize(probs, static_cast<double>(kept) * 0x1p-60);
  }

  std::vector<float> scales_;  // softmax_chunk_scale of each chunk
  std::vector<float> values_;
  std::vector<TokenId> order_;
  std::vector<std::uint32_t> counts_;
  std::vector<std::uint64_t> mass_;
};

// One-shot convenience; prefer a long-lived Warper in loops.
inline void warp(std::span<const float> logits, const SamplingParams& params,
                 std::span<float> probs) {
  Warper w;
  w(logits, params, probs);
}

}  // namespace specdec
