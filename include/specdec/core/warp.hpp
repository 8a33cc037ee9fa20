// Logit warping: temperature, top-k, top-p, in that order (the Hugging Face
// order), turning one row of logits into the distribution a rule samples from.
// Target and draft rows go through the same function, so both sides of every
// acceptance test are warped identically (ALGORITHMS.md, notation).
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

// Reusable warping workspace: holds the scratch buffers so a decoder that warps
// a row per tree node allocates once, not per row.
class Warper {
 public:
  // Writes the warped distribution of `logits` into `probs` (same size).
  void operator()(std::span<const float> logits, const SamplingParams& params,
                  std::span<float> probs) {
    params.validate();
    check_logits(logits);
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

    // Softmax at temperature T over the survivors (max subtracted; sum in double).
    float max_logit = -std::numeric_limits<float>::infinity();
    for (float v : logits) max_logit = std::max(max_logit, v);
    const float inv_t = 1.0f / params.temperature;
    double sum = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) {
      const bool keep = logits[i] >= threshold && logits[i] != -std::numeric_limits<float>::infinity();
      const float e = keep ? std::exp((logits[i] - max_logit) * inv_t) : 0.0f;
      probs[i] = e;
      sum += e;
    }
    normalize(probs, sum);
    if (params.top_p < 1.0f) apply_top_p(probs, params.top_p);
  }

 private:
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
    const double inv = 1.0 / sum;
    for (float& p : probs) p = static_cast<float>(p * inv);
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
